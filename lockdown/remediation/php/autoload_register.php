<?php
/*
 * Where PHP files register autoloaders (remediation/class_map.py): stdin {"files": [path, ...]};
 * stdout one JSON line per `spl_autoload_register(` call {"file", "line": of the call,
 * "end_line": of the `;` ending its statement, "statement": whether the call is the whole
 * statement (it starts it and its `)` is followed by the `;`), "kind": "closure" (function, fn,
 * static function, static fn), "string", "array" or "other" for its first argument, "names":
 * the identifiers and quoted strings of that argument, "namespace", "class": the class, trait
 * or enum whose body holds the call (fully qualified, "" outside one)}.
 */
$in = json_decode(stream_get_contents(STDIN), true);

function tid($t)
{
    return is_array($t) ? $t[0] : $t;
}

function line_of(array $tokens, int $i): int
{
    // a one-character token has no line: the last array token before it, and its newlines
    for ($j = $i; $j >= 0 && !is_array($tokens[$j]); $j--);
    if ($j < 0) {
        return 1;
    }
    $line = $tokens[$j][2];
    for (; $j < $i; $j++) {
        $line += substr_count(is_array($tokens[$j]) ? $tokens[$j][1] : $tokens[$j], "\n");
    }
    return $line;
}

$skip = [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT];
foreach ($in['files'] as $file) {
    $code = @file_get_contents($file);
    if ($code === false || stripos($code, 'spl_autoload_register') === false) {
        continue;
    }
    try {
        $tokens = token_get_all($code, TOKEN_PARSE);
    } catch (\Throwable $e) {
        continue;
    }
    $n = count($tokens);
    $ns = '';
    $depth = 0;
    $classes = [];          // [name, depth at which its body opened]
    $pendingClass = null;
    $prev = null;           // index of the previous significant token
    for ($i = 0; $i < $n; $i++) {
        $id = tid($tokens[$i]);
        if (in_array($id, $skip, true)) {
            continue;
        }
        if ($id === T_NAMESPACE && !($prev !== null && tid($tokens[$prev]) === T_NS_SEPARATOR)) {
            $name = '';
            for ($j = $i + 1; $j < $n && !in_array(tid($tokens[$j]), [';', '{'], true); $j++) {
                if (in_array(tid($tokens[$j]), [T_STRING, T_NAME_QUALIFIED], true)) {
                    $name .= $tokens[$j][1];
                }
            }
            $ns = $name;
        }
        $kinds = [T_CLASS, T_INTERFACE, T_TRAIT];
        if (defined('T_ENUM')) {
            $kinds[] = T_ENUM;
        }
        if (in_array($id, $kinds, true) && !($prev !== null && in_array(tid($tokens[$prev]), [T_DOUBLE_COLON, T_NEW], true))) {
            for ($j = $i + 1; $j < $n && in_array(tid($tokens[$j]), $skip, true); $j++);
            if ($j < $n && tid($tokens[$j]) === T_STRING) {
                $pendingClass = ($ns === '' ? '' : $ns . '\\') . $tokens[$j][1];
            }
        }
        if ($id === '{' || $id === T_CURLY_OPEN || $id === T_DOLLAR_OPEN_CURLY_BRACES) {
            $depth++;
            if ($id === '{' && $pendingClass !== null) {
                $classes[] = [$pendingClass, $depth];
                $pendingClass = null;
            }
        } elseif ($id === '}') {
            if ($classes && end($classes)[1] === $depth) {
                array_pop($classes);
            }
            $depth--;
        }
        if ($id === T_STRING && strcasecmp($tokens[$i][1], 'spl_autoload_register') === 0) {
            $p = tid($tokens[$prev] ?? ';');
            $starts = in_array($p, [';', '{', '}', T_OPEN_TAG], true);
            // the argument list: from the `(` to its matching `)`
            for ($j = $i + 1; $j < $n && in_array(tid($tokens[$j]), $skip, true); $j++);
            if ($j >= $n || tid($tokens[$j]) !== '(') {
                $prev = $i;
                continue;
            }
            $level = 0;
            $first = null;
            $names = [];
            $argDone = false;
            for ($k = $j; $k < $n; $k++) {
                $t = tid($tokens[$k]);
                if (in_array($t, ['(', '[', '{', T_CURLY_OPEN, T_DOLLAR_OPEN_CURLY_BRACES], true)) {
                    $level++;
                } elseif (in_array($t, [')', ']', '}'], true)) {
                    $level--;
                    if ($level === 0) {
                        break;
                    }
                } elseif ($level === 1 && $t === ',') {
                    $argDone = true;
                }
                if ($k > $j && !$argDone && !in_array($t, $skip, true)) {
                    if ($first === null) {
                        $first = $k;
                    }
                    if (in_array($t, [T_STRING, T_NAME_QUALIFIED, T_NAME_FULLY_QUALIFIED], true)) {
                        $names[] = ltrim($tokens[$k][1], '\\');
                    } elseif ($t === T_CONSTANT_ENCAPSED_STRING) {
                        $names[] = stripcslashes(substr($tokens[$k][1], 1, -1));
                    }
                }
            }
            $close = $k;
            for ($m = $close + 1; $m < $n && in_array(tid($tokens[$m]), $skip, true); $m++);
            $semi = $m;
            while ($semi < $n && tid($tokens[$semi]) !== ';') {
                $semi++;
            }
            $kind = 'other';
            if ($first !== null) {
                $f = tid($tokens[$first]);
                $after = $first + 1;
                while ($after < $n && in_array(tid($tokens[$after]), $skip, true)) {
                    $after++;
                }
                if ($f === T_FUNCTION || $f === T_FN || ($f === T_STATIC && in_array(tid($tokens[$after] ?? ''), [T_FUNCTION, T_FN], true))) {
                    $kind = 'closure';
                } elseif ($f === T_CONSTANT_ENCAPSED_STRING) {
                    $kind = 'string';
                } elseif ($f === '[' || $f === T_ARRAY) {
                    $kind = 'array';
                }
            }
            echo json_encode(['file' => $file, 'line' => $tokens[$i][2], 'end_line' => line_of($tokens, $semi < $n ? $semi : $n - 1),
                'statement' => $starts && $m === $semi, 'kind' => $kind, 'names' => $names, 'namespace' => $ns,
                'class' => $classes ? end($classes)[0] : ''], JSON_UNESCAPED_SLASHES), "\n";
        }
        $prev = $i;
    }
}
