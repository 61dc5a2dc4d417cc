<?php
/*
 * The setup of one function done once per request (remediation/generate.py, per-call-setup):
 * the statement of its body that runs the setup's loop is wrapped so that it runs on the first
 * call only, and its results -- the variables it assigns that the rest of the body uses -- are
 * kept in a static variable and restored on every later call.
 *
 * stdin: {"file": path, "line": n, "name": "function name", "method": bool, "out": path,
 *         "loop": ["builtin", ...] (the builtins the finding saw called k times on every call)}
 * stdout: {"written": "out", "statement_line": n, "results": ["$var", ...], "writes": ["$var", ...]}
 *         or {"refused": "why"}
 *
 * The setup statement is the first top-level statement of the body that calls one of `loop`.
 * It must not depend on the call: it names no parameter, no `$this`, and no variable that an
 * earlier statement depending on the call assigned (a variable the setup only writes into, such
 * as a counter `$t['n']++`, is no input: that write is a side effect, done once per request
 * afterwards, and reported in `writes`). Refused as well: a setup that returns, prints,
 * yields, jumps (goto), declares globals or statics, binds a result by reference, or assigns
 * nothing the rest of the body uses; bodies in the alternative syntax (`endif;`), where
 * statements cannot be told apart by braces alone.
 *
 * Function statics live for the request under php-fpm, so the setup runs once per request
 * (per worker request, not per process); for a method, once per method, whatever the object
 * (the setup names no `$this`).
 */
require __DIR__ . '/function_site.php';

const ASSIGN_OPS = ['=', T_PLUS_EQUAL, T_MINUS_EQUAL, T_MUL_EQUAL, T_DIV_EQUAL, T_CONCAT_EQUAL, T_MOD_EQUAL,
                    T_AND_EQUAL, T_OR_EQUAL, T_XOR_EQUAL, T_SL_EQUAL, T_SR_EQUAL, T_POW_EQUAL,
                    T_COALESCE_EQUAL];
const SKIP = [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT];

function significant(array $tokens, int $from, int $to): array
{
    $out = [];
    for ($k = $from; $k <= $to; $k++) {
        if (!is_array($tokens[$k]) || !in_array($tokens[$k][0], SKIP, true)) {
            $out[] = $k;
        }
    }
    return $out;
}

/** [[first token, last token], ...] of the body's top-level statements. */
function statements(array $tokens, int $open, int $close): array
{
    $out = [];
    $depth = 0;
    $start = null;
    for ($k = $open + 1; $k < $close; $k++) {
        $id = tok_id($tokens[$k]);
        if ($start === null) {
            if (in_array($id, SKIP, true)) {
                continue;
            }
            $start = $k;
        }
        if (in_array($id, [T_ENDIF, T_ENDFOREACH, T_ENDFOR, T_ENDWHILE, T_ENDSWITCH, T_ENDDECLARE], true)) {
            refuse('its body uses the alternative syntax (' . token_name($id) . '), whose statements lockdown does not split');
        }
        if (in_array($id, ['(', '[', '{', T_CURLY_OPEN, T_DOLLAR_OPEN_CURLY_BRACES], true)) {
            $depth++;
        } elseif (in_array($id, [')', ']', '}'], true)) {
            $depth--;
            if ($depth === 0 && $id === '}') {
                // a block statement ends here unless an else/elseif/catch/finally/while follows,
                // or the braces were an expression's (a closure, a match) that goes on to a ";"
                $j = next_significant($tokens, $k, $close);
                $follow = $j < $close ? tok_id($tokens[$j]) : null;
                if (!in_array($follow, [T_ELSE, T_ELSEIF, T_CATCH, T_FINALLY, T_WHILE, ';', ')', ',', '->',
                                        T_OBJECT_OPERATOR, T_NULLSAFE_OBJECT_OPERATOR, '(', '['], true)
                    && !expression_braces($tokens, $start, $k)) {
                    $out[] = [$start, $k];
                    $start = null;
                }
            }
        } elseif ($depth === 0 && ($id === ';' || $id === T_CLOSE_TAG)) {
            $out[] = [$start, $k];
            $start = null;
        }
    }
    if ($start !== null) {
        refuse('the body\'s last statement does not end');
    }
    return $out;
}

/** Whether the statement begun at $start is an expression whose braces close at $k (it will end with ";"). */
function expression_braces(array $tokens, int $start, int $k): bool
{
    $first = tok_id($tokens[$start]);
    $blocks = [T_IF, T_FOREACH, T_FOR, T_WHILE, T_DO, T_SWITCH, T_TRY, '{', T_DECLARE, T_FUNCTION, T_CLASS,
               T_ABSTRACT, T_FINAL, T_INTERFACE, T_TRAIT];
    if (defined('T_ENUM')) {
        $blocks[] = T_ENUM;
    }
    return !in_array($first, $blocks, true);
}

/**
 * Each variable of tokens [$a, $b]: how it is used there. 'read' (its value is used), 'write'
 * (assigned a value as a whole), 'into' (an element or property of it written, `$v[..] = `,
 * `$v->p++`: a change to it that does not read it otherwise), 'update' (`$v++`, `$v .= ..`: read,
 * then written as a whole), 'ref' (bound by reference).
 */
function uses(array $tokens, int $a, int $b): array
{
    $out = [];
    $sig = significant($tokens, $a, $b);
    $m = count($sig);
    $listDepth = 0;             // inside `[...] =` / `list(...) =` destructuring, or foreach's "as"
    $asDepth = null;
    for ($s = 0; $s < $m; $s++) {
        $k = $sig[$s];
        $id = tok_id($tokens[$k]);
        if ($id === T_AS) {
            $asDepth = 0;       // foreach (... as $k => $v): the targets up to the matching ")"
            continue;
        }
        if ($asDepth !== null) {
            if ($id === '(' || $id === '[') {
                $asDepth++;
            } elseif ($id === ')' || $id === ']') {
                if ($asDepth === 0) {
                    $asDepth = null;
                    continue;
                }
                $asDepth--;
            }
        }
        if ($id !== T_VARIABLE) {
            continue;
        }
        $name = $tokens[$k][1];
        $prev = $s > 0 ? tok_id($tokens[$sig[$s - 1]]) : null;
        if ($prev === T_DOUBLE_COLON || $prev === T_OBJECT_OPERATOR || $prev === T_NULLSAFE_OBJECT_OPERATOR) {
            continue;           // a static property (Cls::$p) or a variable property name, no local
        }
        // what follows the variable and its subscripts / properties
        $e = $s + 1;
        $sub = false;
        while ($e < $m) {
            $t = tok_id($tokens[$sig[$e]]);
            if ($t === '[' || $t === '{') {
                $level = 0;
                for (; $e < $m; $e++) {
                    $u = tok_id($tokens[$sig[$e]]);
                    if ($u === '[' || $u === '{') {
                        $level++;
                    } elseif ($u === ']' || $u === '}') {
                        $level--;
                        if ($level === 0) {
                            break;
                        }
                    }
                }
                $e++;
                $sub = true;
            } elseif (($t === T_OBJECT_OPERATOR || $t === T_NULLSAFE_OBJECT_OPERATOR) && $e + 1 < $m
                      && tok_id($tokens[$sig[$e + 1]]) === T_STRING
                      && ($e + 2 >= $m || tok_id($tokens[$sig[$e + 2]]) !== '(')) {
                $e += 2;        // a property, not a method call
                $sub = true;
            } else {
                break;
            }
        }
        $next = $e < $m ? tok_id($tokens[$sig[$e]]) : null;
        $after = $e + 1 < $m ? tok_id($tokens[$sig[$e + 1]]) : null;
        $assigned = in_array($next, ASSIGN_OPS, true) || in_array($next, [T_INC, T_DEC], true)
            || in_array($prev, [T_INC, T_DEC], true);
        if ($asDepth !== null) {
            $kind = $sub ? 'into' : 'write';
        } elseif ($next === '=' && ($after === '&' || $after === T_AMPERSAND_NOT_FOLLOWED_BY_VAR_OR_VARARG
                                    || $after === T_AMPERSAND_FOLLOWED_BY_VAR_OR_VARARG)) {
            $kind = 'ref';
        } elseif ($assigned) {
            // `$v = ` writes it; `$v .= `, `$v++` update it (read it, then write it); `$v[..] op= `
            // writes into it
            $kind = $sub ? 'into' : ($next === '=' ? 'write' : 'update');
        } elseif (destructured($tokens, $sig, $s)) {
            $kind = $sub ? 'into' : 'write';
        } else {
            $kind = 'read';
        }
        $out[] = [$name, $kind, $k];
    }
    return $out;
}

/** Whether the variable at significant index $s sits in a `[...] = ` or `list(...) = ` target. */
function destructured(array $tokens, array $sig, int $s): bool
{
    $level = 0;
    for ($e = $s + 1; $e < count($sig); $e++) {
        $u = tok_id($tokens[$sig[$e]]);
        if ($u === '[' || $u === '(') {
            $level++;
        } elseif ($u === ']' || $u === ')') {
            if ($level === 0) {
                $next = $e + 1 < count($sig) ? tok_id($tokens[$sig[$e + 1]]) : null;
                if ($next !== '=') {
                    return false;
                }
                // the bracket that opened this list: "[" or "list("
                $depth = 0;
                for ($b = $s - 1; $b >= 0; $b--) {
                    $v = tok_id($tokens[$sig[$b]]);
                    if ($v === ']' || $v === ')') {
                        $depth++;
                    } elseif ($v === '[' || $v === '(') {
                        if ($depth === 0) {
                            return $v === '[' || ($b > 0 && tok_id($tokens[$sig[$b - 1]]) === T_LIST);
                        }
                        $depth--;
                    }
                }
                return false;
            }
            $level--;
        } elseif (($u === ';' || $u === '=') && $level === 0) {
            return false;
        }
    }
    return false;
}

function calls_one_of(array $tokens, int $a, int $b, array $names): ?string
{
    $sig = significant($tokens, $a, $b);
    foreach ($sig as $s => $k) {
        $t = $tokens[$k];
        if (!in_array(tok_id($t), [T_STRING, T_NAME_FULLY_QUALIFIED], true)) {
            continue;
        }
        $prev = $s > 0 ? tok_id($tokens[$sig[$s - 1]]) : null;
        $next = $s + 1 < count($sig) ? tok_id($tokens[$sig[$s + 1]]) : null;
        $name = strtolower(ltrim($t[1], '\\'));
        if ($next === '(' && !in_array($prev, [T_OBJECT_OPERATOR, T_NULLSAFE_OBJECT_OPERATOR, T_DOUBLE_COLON, T_FUNCTION, T_NEW], true)
            && in_array($name, $names, true)) {
            return $name;
        }
    }
    return null;
}

[$in, $code, $site] = requested_site();
if ($site['yields']) {
    refuse('a generator (yield)');
}
$tokens = $site['tokens'];
$loop = array_map('strtolower', $in['loop'] ?? []);
if (!$loop) {
    refuse('the finding names no loop builtin');
}
$call = array_merge($site['params'], ['$this']);
$body = statements($tokens, $site['open'], $site['close']);
$varying = array_fill_keys($call, true);    // variables whose value depends on the call
$setup = null;
foreach ($body as $i => [$a, $b]) {
    $used = uses($tokens, $a, $b);
    $inputs = [];
    foreach ($used as [$name, $kind]) {
        if ($kind === 'read' || $kind === 'ref' || $kind === 'update') {
            $inputs[$name] = true;
        }
    }
    $depends = array_intersect_key($inputs, $varying);
    $found = calls_one_of($tokens, $a, $b, $loop);
    if ($found !== null) {
        if ($depends) {
            refuse('the statement calling ' . $found . ' on line ' . $tokens[$a][2] . ' reads '
                   . implode(', ', array_keys($depends)) . ', which depends on the call');
        }
        $setup = [$i, $a, $b, $used, $found];
        break;
    }
    if ($depends) {
        foreach ($used as [$name, $kind]) {
            if ($kind !== 'read') {
                $varying[$name] = true;     // written from what depends on the call
            }
        }
    }
}
if ($setup === null) {
    refuse('no top-level statement of its body calls ' . implode(', ', $loop));
}
[$index, $a, $b, $used, $found] = $setup;
$line = is_array($tokens[$a]) ? $tokens[$a][2] : null;
foreach (significant($tokens, $a, $b) as $k) {
    $id = tok_id($tokens[$k]);
    $bad = [T_RETURN => 'returns', T_ECHO => 'prints', T_PRINT => 'prints', T_INLINE_HTML => 'prints',
            T_YIELD => 'yields', T_YIELD_FROM => 'yields', T_GOTO => 'jumps (goto)', T_GLOBAL => 'declares globals',
            T_STATIC => 'declares statics', T_UNSET => 'unsets variables', T_INCLUDE => 'includes a file',
            T_INCLUDE_ONCE => 'includes a file', T_REQUIRE => 'includes a file', T_REQUIRE_ONCE => 'includes a file'];
    if (isset($bad[$id]) && !($id === T_STATIC && in_array(tok_id($tokens[$k + 1] ?? null), [T_DOUBLE_COLON], true))) {
        refuse("the setup statement (line $line) {$bad[$id]} (line {$tokens[$k][2]}): running it once would change that");
    }
}
if (preg_match('/\$lockdown_setup\b/', $code)) {
    refuse('the file already names $lockdown_setup');
}
// its results: variables it assigns that the rest of the body uses
$assigned = [];
$writes = [];
foreach ($used as [$name, $kind]) {
    if ($kind === 'write') {
        $assigned[$name] = true;
    } elseif ($kind === 'ref') {
        $assigned[$name] = 'ref';
    } elseif ($kind === 'into' || $kind === 'update') {
        $writes[$name] = true;
    }
}
$later = [];
foreach (array_slice($body, $index + 1) as [$c, $d]) {
    foreach (uses($tokens, $c, $d) as [$name]) {
        $later[$name] = true;
    }
}
// a variable it fills (`$v[$k] = ..`) that the rest uses is a result too, if what it held before the
// setup does not depend on the call
foreach (array_intersect_key($writes, $later) as $name => $_) {
    if (isset($varying[$name])) {
        refuse("the setup adds to $name, which holds what depends on the call before it");
    }
    $assigned[$name] ??= true;
}
$results = array_keys(array_intersect_key($assigned, $later));
foreach ($results as $r) {
    if ($assigned[$r] === 'ref') {
        refuse("the setup binds $r by reference, which a kept copy would not be");
    }
}
if (!$results) {
    refuse("the setup statement (line $line) assigns nothing the rest of the function uses");
}
$writes = array_keys(array_diff_key($writes, $assigned));     // what it changes of variables it did not make
// the new text: the statement inside `if ($lockdown_setup === null) { ... } else { restore }`
$offsets = $site['offsets'];
$from = $offsets[$a];
$to = $offsets[$b] + strlen(is_array($tokens[$b]) ? $tokens[$b][1] : $tokens[$b]);
$lineStart = strrpos(substr($code, 0, $from), "\n");
$lineStart = $lineStart === false ? 0 : $lineStart + 1;
$indent = preg_match('/^[ \t]*/', substr($code, $lineStart), $m) ? $m[0] : '';
$unit = str_starts_with($indent, "\t") || $indent === '' ? "\t" : (strlen($indent) % 4 === 0 ? '    ' : '  ');
$text = substr($code, $from, $to - $from);
$multiline = false;
for ($k = $a; $k <= $b; $k++) {
    $id = tok_id($tokens[$k]);
    if (in_array($id, [T_START_HEREDOC, T_ENCAPSED_AND_WHITESPACE], true)
        || ($id === T_CONSTANT_ENCAPSED_STRING && str_contains($tokens[$k][1], "\n"))) {
        $multiline = true;          // re-indenting would change a string's text
    }
}
if (!$multiline) {
    $text = str_replace("\n", "\n" . $unit, $text);
}
$list = implode(', ', $results);
$note = $writes ? "$indent// What it writes into " . implode(', ', $writes) . " now happens once per request too.\n" : '';
$block = "// lockdown: this setup does not depend on the call's arguments; it runs on the first call of the\n"
    . "$indent// request only, and its results ($list) are kept for the later calls.\n"
    . $note
    . "{$indent}static \$lockdown_setup = null;\n"
    . "{$indent}if (\$lockdown_setup === null) {\n"
    . "$indent$unit$text\n"
    . "$indent$unit\$lockdown_setup = [$list];\n"
    . "$indent} else {\n"
    . "$indent{$unit}[$list] = \$lockdown_setup;\n"
    . "$indent}";
$code = substr($code, 0, $from) . $block . substr($code, $to);
if (@file_put_contents($in['out'], $code) !== strlen($code)) {
    refuse("cannot write {$in['out']}");
}
echo json_encode(['written' => $in['out'], 'statement_line' => $line, 'results' => $results, 'writes' => $writes,
                  'loop' => $found], JSON_UNESCAPED_SLASHES), "\n";
