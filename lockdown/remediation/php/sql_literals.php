<?php
/*
 * The string literals of PHP files that could be SQL, each with the named function or method
 * whose body holds it (remediation/sender.py): how lockdown finds the PHP function that sends
 * a statement the capture saw, whatever the app's database layer.
 *
 * stdin: {"files": [path, ...], "words": ["select", ...]}  (a literal is reported when its
 *        text holds one of the words, case-insensitively)
 * stdout: one JSON object per line: {"file", "line" (the literal's), "text" (the literal's
 *         value; a variable interpolated in a double-quoted string or heredoc is "?"),
 *         "function" (namespace\Class::method or namespace\function, null outside any),
 *         "function_line" (the line of its `function` keyword), "static" (bool), "method"
 *         (bool), "closure" (true when the literal sits in a closure or arrow function inside it)}
 *         or {"file", "error"} for a file that does not parse.
 */
$in = json_decode(stream_get_contents(STDIN), true);
$words = array_map('strtolower', $in['words'] ?? []);

function tid($t)
{
    return is_array($t) ? $t[0] : $t;
}

function unquote(string $s): string
{
    $q = $s[0] ?? '';
    if ($q === "'") {
        return strtr(substr($s, 1, -1), ["\\'" => "'", '\\\\' => '\\']);
    }
    if ($q === '"') {
        return stripcslashes(substr($s, 1, -1));
    }
    return $s;
}

function scan(string $file, array $words): void
{
    $code = @file_get_contents($file);
    if ($code === false) {
        echo json_encode(['file' => $file, 'error' => 'cannot read'], JSON_UNESCAPED_SLASHES), "\n";
        return;
    }
    try {
        $tokens = token_get_all($code, TOKEN_PARSE);
    } catch (\Throwable $e) {
        echo json_encode(['file' => $file, 'error' => $e->getMessage()], JSON_UNESCAPED_SLASHES), "\n";
        return;
    }
    $n = count($tokens);
    $namespace = '';
    $depth = 0;
    $scopes = [];          // [kind: class|function|closure, name, depth at which its body opened, line, static]
    $pending = null;       // a declaration whose body's "{" comes next
    $prev = null;          // previous significant token id
    $modifiers = [];
    for ($i = 0; $i < $n; $i++) {
        $t = $tokens[$i];
        $id = tid($t);
        if (in_array($id, [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT], true)) {
            continue;
        }
        $afterColons = $prev === T_DOUBLE_COLON || $prev === T_OBJECT_OPERATOR || $prev === T_NULLSAFE_OBJECT_OPERATOR;
        $prev = $id;
        if ($id === T_NAMESPACE && !$afterColons) {
            $name = '';
            for ($j = $i + 1; $j < $n && !in_array(tid($tokens[$j]), [';', '{'], true); $j++) {
                if (in_array(tid($tokens[$j]), [T_STRING, T_NAME_QUALIFIED, T_NS_SEPARATOR], true)) {
                    $name .= $tokens[$j][1];
                }
            }
            $namespace = $name;
            continue;
        }
        if (in_array($id, [T_STATIC, T_PUBLIC, T_PROTECTED, T_PRIVATE, T_FINAL, T_ABSTRACT], true)) {
            $modifiers[] = $id;
            continue;
        }
        if (!$afterColons && (in_array($id, [T_CLASS, T_TRAIT, T_INTERFACE], true) || (defined('T_ENUM') && $id === T_ENUM))) {
            $j = $i + 1;
            while ($j < $n && in_array(tid($tokens[$j]), [T_WHITESPACE, T_COMMENT], true)) {
                $j++;
            }
            $name = tid($tokens[$j]) === T_STRING ? $tokens[$j][1] : null;   // null: anonymous class
            $pending = ['class', $name, $t[2], false];
            $modifiers = [];
            continue;
        }
        if ($id === T_FUNCTION || $id === T_FN) {
            $j = $i + 1;
            while ($j < $n && in_array(tid($tokens[$j]), [T_WHITESPACE, T_COMMENT, '&', T_AMPERSAND_NOT_FOLLOWED_BY_VAR_OR_VARARG], true)) {
                $j++;
            }
            $named = $id === T_FUNCTION && tid($tokens[$j]) === T_STRING;
            $static = in_array(T_STATIC, $modifiers, true);
            $pending = $named ? ['function', $tokens[$j][1], $t[2], $static] : ['closure', null, $t[2], false];
            $modifiers = [];
            if ($id === T_FN) {
                // an arrow function has no braces: its body ends at the depth it started; treat
                // it as a closure scope until the enclosing statement ends
                $scopes[] = ['closure', null, $depth + 0.5, $t[2], false];
                $pending = null;
            }
            continue;
        }
        $modifiers = [];
        if ($id === '{' || $id === T_CURLY_OPEN || $id === T_DOLLAR_OPEN_CURLY_BRACES) {
            $depth++;
            if ($id === '{' && $pending !== null) {
                $scopes[] = [$pending[0], $pending[1], $depth, $pending[2], $pending[3]];
                $pending = null;
            }
            continue;
        }
        if ($id === ';' && $pending !== null && $pending[0] === 'function') {
            $pending = null;     // an abstract or interface method: no body
        }
        if ($id === '}') {
            while ($scopes && end($scopes)[2] >= $depth) {
                array_pop($scopes);
            }
            $depth--;
            continue;
        }
        if (in_array($id, [';', ',', ')', ']'], true)) {
            while ($scopes && end($scopes)[0] === 'closure' && end($scopes)[2] === $depth + 0.5 && $id !== ')') {
                array_pop($scopes);
            }
        }
        $text = null;
        $line = is_array($t) ? $t[2] : null;
        if ($id === T_CONSTANT_ENCAPSED_STRING) {
            $text = unquote($t[1]);
        } elseif ($id === '"' || $id === T_START_HEREDOC) {
            $end = $id === '"' ? '"' : T_END_HEREDOC;
            $text = '';
            for ($j = $i + 1; $j < $n && tid($tokens[$j]) !== $end; $j++) {
                $u = $tokens[$j];
                if (tid($u) === T_ENCAPSED_AND_WHITESPACE) {
                    $text .= $u[1];
                    $line ??= $u[2];
                } elseif (in_array(tid($u), [T_VARIABLE, T_CURLY_OPEN, T_DOLLAR_OPEN_CURLY_BRACES], true)) {
                    // one interpolation: skip to its end
                    $level = tid($u) === T_VARIABLE ? 0 : 1;
                    for ($j++; $j < $n && $level > 0; $j++) {
                        $v = tid($tokens[$j]);
                        if ($v === '{' || $v === T_CURLY_OPEN || $v === T_DOLLAR_OPEN_CURLY_BRACES) {
                            $level++;
                        } elseif ($v === '}') {
                            $level--;
                        }
                    }
                    if (tid($u) === T_VARIABLE) {
                        // $a->b or $a[...] right after the variable
                        while ($j + 1 < $n && in_array(tid($tokens[$j + 1]), [T_OBJECT_OPERATOR, '[', T_STRING, ']', T_NUM_STRING], true)
                               && tid($tokens[$j + 1]) !== $end) {
                            $j++;
                        }
                    } else {
                        $j--;
                    }
                    $text .= '?';
                }
            }
            $i = $j;
            $text = $id === '"' ? stripcslashes($text) : $text;
        }
        if ($text === null) {
            continue;
        }
        $lower = strtolower($text);
        $hit = false;
        foreach ($words as $w) {
            if (strpos($lower, $w) !== false) {
                $hit = true;
                break;
            }
        }
        if (!$hit) {
            continue;
        }
        $fn = null;
        $closure = false;
        $class = null;
        for ($k = count($scopes) - 1; $k >= 0; $k--) {
            if ($scopes[$k][0] === 'closure') {
                $closure = true;
            } elseif ($scopes[$k][0] === 'function' && $fn === null) {
                $fn = $scopes[$k];
            } elseif ($scopes[$k][0] === 'class') {
                $class = $scopes[$k];
                break;
            }
        }
        $prefix = $namespace === '' ? '' : $namespace . '\\';
        $name = null;
        if ($fn !== null) {
            $name = $class !== null && $class[1] !== null ? $prefix . $class[1] . '::' . $fn[1]
                : ($class !== null ? null : $prefix . $fn[1]);
        }
        echo json_encode([
            'file' => $file, 'line' => $line, 'text' => $text, 'function' => $name,
            'function_line' => $fn[3] ?? null, 'static' => (bool) ($fn[4] ?? false),
            'method' => $class !== null, 'closure' => $closure,
        ], JSON_UNESCAPED_SLASHES | JSON_INVALID_UTF8_SUBSTITUTE), "\n";
    }
}

foreach ($in['files'] as $file) {
    scan($file, $words);
}
