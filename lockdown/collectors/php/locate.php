<?php
/*
 * Where a function's body starts: for the argument probe (arg_probe.py), which inserts one call
 * right after the opening brace of each candidate function in a copy of the application.
 *
 * stdin: {"files": [path, ...], "functions": ["Ns\\Class::method", "Ns\\function", ...]}
 * stdout: {"Ns\\Class::method": [{"file": path, "offset": bytes, "line": n}, ...], ...}
 * Every definition of a name is listed: an app may define one function in several files and
 * load one of them (WordPress's wp-admin/includes/noop.php stubs site_url() for its installer).
 * `offset` is the byte right after the body's "{"; `line` is the line of its `function`. Abstract and interface methods (no body),
 * closures and anonymous classes are never matched. PHP's own tokenizer, so strings, comments
 * and heredocs cannot fool it.
 */
$in = json_decode(stream_get_contents(STDIN), true);
$wanted = array_flip(array_map('strtolower', $in['functions']));
$found = [];

foreach ($in['files'] as $file) {
    $code = @file_get_contents($file);
    if ($code === false) {
        continue;
    }
    try {
        $tokens = token_get_all($code, TOKEN_PARSE);
    } catch (\Throwable $e) {
        continue;                          // not parseable by this PHP: skip the file
    }
    $namespace = '';
    $depth = 0;
    $classes = [];                         // [name, depth at which its body opened]
    $pendingClass = null;
    $offset = 0;
    $n = count($tokens);
    $prev = null;                          // previous significant token id or char
    for ($i = 0; $i < $n; $i++) {
        $t = $tokens[$i];
        $text = is_array($t) ? $t[1] : $t;
        $id = is_array($t) ? $t[0] : $t;
        if ($id === T_NAMESPACE && $prev !== T_DOUBLE_COLON) {
            $name = '';
            for ($j = $i + 1; $j < $n; $j++) {
                $u = $tokens[$j];
                if (is_array($u) && in_array($u[0], [T_STRING, T_NAME_QUALIFIED], true)) {
                    $name .= $u[1];
                } elseif (!is_array($u) || $u[0] !== T_WHITESPACE) {
                    break;
                }
            }
            $namespace = $name;
        } elseif (in_array($id, [T_CLASS, T_TRAIT, T_INTERFACE], true)
                  || (defined('T_ENUM') && $id === T_ENUM)) {
            if ($prev === T_NEW) {
                $pendingClass = 'class@anonymous';  // its methods are nobody's candidates
            } elseif ($prev !== T_DOUBLE_COLON) {
                for ($j = $i + 1; $j < $n && is_array($tokens[$j]) && $tokens[$j][0] === T_WHITESPACE; $j++);
                if ($j < $n && is_array($tokens[$j]) && $tokens[$j][0] === T_STRING) {
                    $pendingClass = ($namespace !== '' ? $namespace . '\\' : '') . $tokens[$j][1];
                }
            }
        } elseif ($id === T_FUNCTION) {
            // skip whitespace and a by-reference "&" (its own token kind since PHP 8.1)
            for ($j = $i + 1; $j < $n && (is_array($tokens[$j])
                    ? in_array($tokens[$j][0], [T_WHITESPACE, T_AMPERSAND_NOT_FOLLOWED_BY_VAR_OR_VARARG], true)
                    : $tokens[$j] === '&'); $j++);
            if ($j < $n && is_array($tokens[$j]) && $tokens[$j][0] === T_STRING) {
                $fn = $tokens[$j][1];
                $class = $classes ? end($classes)[0] : null;
                $qualified = $class !== null ? $class . '::' . $fn
                    : ($namespace !== '' ? $namespace . '\\' : '') . $fn;
                $key = strtolower($qualified);
                if (isset($wanted[$key])) {
                    // the body's brace: the first "{" or ";" after the parameter list's ")"
                    $paren = 0;
                    $pos = $offset;
                    for ($k = $i; $k < $n; $k++) {
                        $u = $tokens[$k];
                        $s = is_array($u) ? $u[1] : $u;
                        if ($u === '(') {
                            $paren++;
                        } elseif ($u === ')') {
                            $paren--;
                        } elseif ($paren === 0 && ($u === ';' || $u === '{')) {
                            if ($u === '{') {
                                $found[$qualified][] = ['file' => $file, 'offset' => $pos + 1, 'line' => $t[2]];
                            }
                            break;
                        }
                        $pos += strlen($s);
                    }
                }
            }
        }
        if ($text === '{' || $id === T_CURLY_OPEN || $id === T_DOLLAR_OPEN_CURLY_BRACES) {
            $depth++;
            if ($text === '{' && $pendingClass !== null) {
                $classes[] = [$pendingClass, $depth];
                $pendingClass = null;
            }
        } elseif ($text === '}') {
            if ($classes && end($classes)[1] === $depth) {
                array_pop($classes);
            }
            $depth--;
        }
        if (!is_array($t) || !in_array($t[0], [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT], true)) {
            $prev = $id;
        }
        $offset += strlen($text);
    }
}
echo json_encode((object) $found, JSON_UNESCAPED_SLASHES), "\n";
