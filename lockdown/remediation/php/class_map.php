<?php
/*
 * The classes, interfaces, traits and enums PHP files declare (remediation/class_map.py):
 * stdin {"files": [path, ...]}; stdout one JSON line per declaration {"name": fully qualified,
 * "file": path}, or {"file", "error"} for a file that does not parse. Anonymous classes and
 * `Foo::class` are not declarations.
 */
$in = json_decode(stream_get_contents(STDIN), true);

function tid($t)
{
    return is_array($t) ? $t[0] : $t;
}

foreach ($in['files'] as $file) {
    $code = @file_get_contents($file);
    if ($code === false) {
        continue;
    }
    try {
        $tokens = token_get_all($code, TOKEN_PARSE);
    } catch (\Throwable $e) {
        echo json_encode(['file' => $file, 'error' => $e->getMessage()], JSON_UNESCAPED_SLASHES), "\n";
        continue;
    }
    $ns = '';
    $prev = null;
    $n = count($tokens);
    for ($i = 0; $i < $n; $i++) {
        $id = tid($tokens[$i]);
        if (in_array($id, [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT], true)) {
            continue;
        }
        $afterColons = $prev === T_DOUBLE_COLON || $prev === T_NEW;
        $prev = $id;
        if ($id === T_NAMESPACE) {
            $name = '';
            for ($j = $i + 1; $j < $n && !in_array(tid($tokens[$j]), [';', '{'], true); $j++) {
                if (in_array(tid($tokens[$j]), [T_STRING, T_NAME_QUALIFIED], true)) {
                    $name .= $tokens[$j][1];
                }
            }
            $ns = $name;
            continue;
        }
        $kinds = [T_CLASS, T_INTERFACE, T_TRAIT];
        if (defined('T_ENUM')) {
            $kinds[] = T_ENUM;
        }
        if ($afterColons || !in_array($id, $kinds, true)) {
            continue;
        }
        for ($j = $i + 1; $j < $n && in_array(tid($tokens[$j]), [T_WHITESPACE, T_COMMENT], true); $j++);
        if (tid($tokens[$j]) !== T_STRING) {
            continue;       // an anonymous class
        }
        echo json_encode(['name' => ($ns === '' ? '' : $ns . '\\') . $tokens[$j][1], 'file' => $file],
            JSON_UNESCAPED_SLASHES), "\n";
    }
}
