<?php
/*
 * Eager loading by default for an ORM relation read lazily in a loop (an N+1 whose per-row
 * query no app code holds: Eloquent sends it when `$post->author` is read). The model class
 * that defines the relation method gains `protected $with = ['RELATION'];` (or the relation is
 * added to the `$with` it declares), so every query of the model loads the relation for all
 * its rows in one `IN (...)` query.
 *
 * stdin: {"file", "line" (of the relation method's `function`), "name" (the method), "out"}
 * stdout: {"written": out, "class": short name, "extends", "traits" (the class's, resolved
 *          against the file's imports), "related" (the first `X::class` in the relation method,
 *          resolved), "added_to_existing": bool, "line": of the `$with` changed, else of `class`}
 *          or {"refused": "why"}
 *
 * Refused: the method is not a non-static method of a named class; the class declares `$with`
 * other than as a literal array, or as a static; the array already names the relation (nothing
 * to add); the relation relates the model to itself (loading it by default would load the whole
 * chain). The caller checks what the file alone cannot tell (the parent class, traits and the
 * related model, when they are the app's own).
 */
require __DIR__ . '/function_site.php';

[$in, $code, $site] = requested_site();
$tokens = $site['tokens'];
$n = count($tokens);
if ($site['static']) {
    refuse('the relation method is static');
}

/** The names a statement `use A\B [as C], ...;` at $k imports: [alias => full name]. */
function imports_at(array $tokens, int $k): array
{
    $out = [];
    $name = null;
    $alias = false;
    for ($i = $k + 1, $n = count($tokens); $i < $n; $i++) {
        $id = tok_id($tokens[$i]);
        if (in_array($id, [T_STRING, T_NAME_QUALIFIED, T_NAME_FULLY_QUALIFIED], true)) {
            if ($alias && $name !== null) {
                $out[$tokens[$i][1]] = $name;           // `as Alias`
                $name = null;
            } else {
                $name = ltrim($tokens[$i][1], '\\');
            }
            $alias = false;
        } elseif ($id === T_AS) {
            $alias = true;
        } elseif ($id === ',' || $id === ';') {
            if ($name !== null) {
                $out[substr(strrchr('\\' . $name, '\\'), 1)] = $name;
            }
            $name = null;
            if ($id === ';') {
                break;
            }
        } elseif ($id === '{' || $id === '(' || $id === T_FUNCTION || $id === T_CONST) {
            return [];                                  // a group use, a closure's, a function's: not resolved
        }
    }
    return $out;
}

/** A class name as written, resolved against the file's imports (the written name when unknown). */
function resolved(string $written, array $imports): string
{
    if ($written === '' || $written[0] === '\\') {
        return ltrim($written, '\\');
    }
    $head = explode('\\', $written)[0];
    return isset($imports[$head]) ? $imports[$head] . substr($written, strlen($head)) : $written;
}

// the class whose body holds the method: of the classes before it, the nearest whose braces
// enclose it (TOKEN_PARSE reads `X::class` as a T_STRING, not a T_CLASS)
$class = $open = $close = null;
for ($i = $site['fn']; $i >= 0; $i--) {
    if (tok_id($tokens[$i]) !== T_CLASS) {
        continue;
    }
    for ($o = $i; $o < $n && tok_id($tokens[$o]) !== '{'; $o++);
    $c = $o < $n ? matching($tokens, $o) : null;
    if ($c !== null && $site['fn'] > $o && $site['fn'] < $c) {
        [$class, $open, $close] = [$i, $o, $c];
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
$imports = [];               // the file's own `use` imports (outside every brace)
for ($i = 0, $depth = 0; $i < $n; $i++) {
    $id = tok_id($tokens[$i]);
    if ($id === '{' || $id === T_CURLY_OPEN || $id === T_DOLLAR_OPEN_CURLY_BRACES) {
        $depth++;
    } elseif ($id === '}') {
        $depth--;
    } elseif ($id === T_USE && $depth === 0) {
        $imports += imports_at($tokens, $i);
    }
}
$extends = '';
for ($i = $nameAt + 1; $i < $open; $i++) {
    if (tok_id($tokens[$i]) === T_EXTENDS) {
        $extends = resolved($tokens[next_significant($tokens, $i, $n)][1], $imports);
    }
}

// at the class body's own level (braces 1, no parentheses): the traits it uses and `$with`
$relation = $in['name'];
$traits = [];
$with = null;
$static = false;
for ($i = $open, $braces = 0, $parens = 0; $i < $close; $i++) {
    $id = tok_id($tokens[$i]);
    if ($id === '{' || $id === T_CURLY_OPEN || $id === T_DOLLAR_OPEN_CURLY_BRACES) {
        $braces++;
    } elseif ($id === '}') {
        $braces--;
    } elseif ($id === '(') {
        $parens++;
    } elseif ($id === ')') {
        $parens--;
    } elseif ($braces === 1 && $parens === 0 && $id === T_USE) {
        foreach (imports_at($tokens, $i) as $alias => $name) {
            $traits[] = resolved($name, $imports);
        }
    } elseif ($braces === 1 && $parens > 0 && $id === T_VARIABLE && $tokens[$i][1] === '$with') {
        $j = $i - 1;
        while ($j > 0 && tok_id($tokens[$j]) === T_WHITESPACE) {
            $j--;
        }
        if (in_array(tok_id($tokens[$j]), [T_PUBLIC, T_PROTECTED, T_PRIVATE, T_READONLY], true)) {
            refuse('the class declares $with as a promoted constructor parameter (line ' . $tokens[$i][2] . ')');
        }
    } elseif ($braces === 1 && $parens === 0 && $id === T_VARIABLE && $tokens[$i][1] === '$with' && $with === null) {
        $with = $i;
        for ($j = $i - 1; $j > $open && !in_array(tok_id($tokens[$j]), [';', '{', '}'], true); $j--) {
            $static = $static || tok_id($tokens[$j]) === T_STATIC;
        }
    }
}
if ($static) {
    refuse('the class declares a static $with (line ' . $tokens[$with][2] . '), not the ORM\'s');
}

// the related class: the first `X::class` in the relation method's body
$related = '';
for ($i = $site['open']; $i < $site['close']; $i++) {
    $after = $tokens[next_significant($tokens, $i, $n)];
    if (tok_id($tokens[$i]) === T_DOUBLE_COLON && tok_id($after) === T_STRING
        && strcasecmp($after[1], 'class') === 0) {      // TOKEN_PARSE reads `::class` as a T_STRING
        $j = $i - 1;
        while ($j > 0 && tok_id($tokens[$j]) === T_WHITESPACE) {
            $j--;
        }
        $related = in_array(strtolower($tokens[$j][1] ?? ''), ['self', 'static'], true) ? 'self'
            : resolved($tokens[$j][1] ?? '', $imports);
        break;
    }
}
if ($related === 'self' || strcasecmp(substr(strrchr('\\' . $related, '\\'), 1), $tokens[$nameAt][1]) === 0) {
    refuse("the relation relates the model to itself: loading it by default would load the whole chain, "
           . "without end on a cycle");
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
                  && explode(':', substr($tokens[$i][1], 1, -1))[0] === $relation) {
            refuse("the class's \$with (line {$tokens[$with][2]}) already names '$relation'");
        }
    }
    $newline = is_array($tokens[$arr + 1]) && $tokens[$arr + 1][0] === T_WHITESPACE && str_contains($tokens[$arr + 1][1], "\n");
    $edit = [$site['offsets'][$arr] + 1, "'$relation'" . ($empty ? '' : ($newline ? ',' : ', '))];
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
                  'traits' => $traits, 'related' => $related, 'added_to_existing' => $with !== null,
                  'line' => $line], JSON_UNESCAPED_SLASHES), "\n";
