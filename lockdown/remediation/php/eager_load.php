<?php
/*
 * Eager loading by default for an ORM relation read lazily in a loop (an N+1 whose per-row
 * query no app code holds: Eloquent sends it when `$post->author` is read). The model class
 * that defines the relation method gains `protected $with = ['RELATION'];` (or the relation is
 * added to the `$with` it declares), so every query of the model loads the relation for all
 * its rows in one `IN (...)` query.
 *
 * stdin: {"file", "line" (of the relation method's `function`), "name" (the method), "out"}
 * stdout: {"written": out, "class": short name, "extends": the parent's name as written,
 *          "added_to_existing": bool, "line": of the `$with` changed, else of `class`} or {"refused": "why"}
 *
 * Refused: the method is not a non-static method of a class; the class declares `$with` other
 * than as a literal array; the array already names the relation (nothing to add).
 */
require __DIR__ . '/function_site.php';

[$in, $code, $site] = requested_site();
$tokens = $site['tokens'];
$n = count($tokens);
if ($site['static']) {
    refuse('the relation method is static');
}

// the class whose body holds the method: the nearest `class` before it whose braces enclose it
$class = null;
for ($i = $site['fn']; $i >= 0; $i--) {
    if (tok_id($tokens[$i]) === T_CLASS) {
        $class = $i;
        break;
    }
}
if ($class === null) {
    refuse('the relation method is not in a class');
}
$nameAt = next_significant($tokens, $class, $n);
if (tok_id($tokens[$nameAt]) !== T_STRING) {
    refuse('the relation method is in an anonymous class');
}
$extends = '';
$open = null;
for ($i = $nameAt + 1; $i < $n; $i++) {
    $id = tok_id($tokens[$i]);
    if ($id === '{') {
        $open = $i;
        break;
    }
    if ($id === T_EXTENDS) {
        $j = next_significant($tokens, $i, $n);
        $extends = $tokens[$j][1];
    }
}
$depth = 0;
$close = null;
for ($i = $open; $i < $n; $i++) {
    $id = tok_id($tokens[$i]);
    if ($id === '{' || $id === T_CURLY_OPEN || $id === T_DOLLAR_OPEN_CURLY_BRACES) {
        $depth++;
    } elseif ($id === '}' && --$depth === 0) {
        $close = $i;
        break;
    }
}
if ($close === null || $site['fn'] < $open || $site['fn'] > $close) {
    refuse('the relation method is not in a class body');
}

// `$with` declared in the class body (depth 1)
$relation = $in['name'];
$depth = 0;
$with = null;
for ($i = $open; $i < $close; $i++) {
    $id = tok_id($tokens[$i]);
    if ($id === '{' || $id === T_CURLY_OPEN || $id === T_DOLLAR_OPEN_CURLY_BRACES) {
        $depth++;
    } elseif ($id === '}') {
        $depth--;
    } elseif ($depth === 1 && $id === T_VARIABLE && $tokens[$i][1] === '$with') {
        $with = $i;
        break;
    }
}
$edit = null;           // [offset, text to insert]
$line = 0;
if ($with !== null) {
    $eq = next_significant($tokens, $with, $n);
    $arr = $eq < $n && tok_id($tokens[$eq]) === '=' ? next_significant($tokens, $eq, $n) : $n;
    $first = $arr < $n ? tok_id($tokens[$arr]) : null;
    if ($first === T_ARRAY) {
        $arr = next_significant($tokens, $arr, $n);
        $first = tok_id($tokens[$arr]) === '(' ? '(' : null;
    }
    if ($first !== '[' && $first !== '(') {
        refuse('the class declares $with (line ' . $tokens[$with][2] . ') other than as a literal array');
    }
    $end = $first === '[' ? ']' : ')';
    $empty = tok_id($tokens[next_significant($tokens, $arr, $n)]) === $end;
    for ($i = $arr + 1, $d = 0; $i < $n; $i++) {
        $id = tok_id($tokens[$i]);
        if ($id === '[' || $id === '(') {
            $d++;
        } elseif ($id === ']' || $id === ')') {
            if ($d-- === 0) {
                break;
            }
        } elseif ($d === 0 && $id === T_CONSTANT_ENCAPSED_STRING
                  && in_array(substr($tokens[$i][1], 1, -1), [$relation], true)) {
            refuse("the class's \$with (line {$tokens[$with][2]}) already names '$relation'");
        }
    }
    $edit = [$site['offsets'][$arr] + 1, "'$relation'" . ($empty ? '' : ', ')];
    $line = $tokens[$with][2];
} else {
    // a property declared first in the body, indented as the body's first member is
    $member = next_significant($tokens, $open, $n);
    $indent = '    ';
    if (is_array($tokens[$member - 1]) && $tokens[$member - 1][0] === T_WHITESPACE) {
        $ws = $tokens[$member - 1][1];
        $indent = substr($ws, strrpos($ws, "\n") === false ? 0 : strrpos($ws, "\n") + 1);
    }
    $edit = [$site['offsets'][$open] + 1, "\n{$indent}protected \$with = ['$relation'];\n"];
    $line = $tokens[$class][2];
}
$text = substr($code, 0, $edit[0]) . $edit[1] . substr($code, $edit[0]);
if (@file_put_contents($in['out'], $text) === false) {
    refuse("cannot write {$in['out']}");
}
echo json_encode(['written' => $in['out'], 'class' => $tokens[$nameAt][1], 'extends' => $extends,
                  'added_to_existing' => $with !== null, 'line' => $line], JSON_UNESCAPED_SLASHES), "\n";
