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
 * It must not depend on the call: it reads no parameter, no `$this`, no variable that an
 * earlier statement depending on the call touched (a statement reading the call taints every
 * variable it names), no variable ever bound by reference (`=&`, `use (&$v)`, `as &$v`), no
 * global, no static the body writes elsewhere, no superglobal. A variable passed as it is to a
 * call counts as written (the call may take it by reference). A variable the setup only writes
 * into, such as a counter `$t['n']++`, is no input: that write is a side effect, done once per
 * request afterwards, and reported in `writes`. The setup may call only builtins that return
 * what their arguments make (PURE, PURE_PREFIXES) and closures written in it: no method, no
 * app function, no `new`. Refused as well: a setup that returns, prints, throws, exits,
 * yields, jumps, declares globals or statics, uses `static::`, writes into a parameter or the
 * object, binds a result by reference, or assigns nothing the rest of the body uses; a body
 * that reads variables no name shows (func_get_args, extract, compact, `$$v`, eval); bodies in
 * the alternative syntax (`endif;`). Static properties and constants it reads are assumed to
 * hold for the request (the description says so; `verify` compares every page).
 *
 * Function statics live for the request under php-fpm, so the setup runs once per request
 * (per worker request, not per process: a worker runtime that keeps statics across requests,
 * such as Octane or FrankenPHP's worker mode, would keep it longer); for a method, once per
 * method, whatever the object (the setup names no `$this`).
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
            if (in_array($id, [T_ELSE, T_ELSEIF, T_CATCH, T_FINALLY], true)) {
                refuse('a statement of its body begins with ' . token_name($id) . ' (an if without braces before it?)');
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
            if ($depth === 0 && $id === '}' && !expression_braces($tokens, $start, $k)) {
                // a block statement ends at its brace unless else/elseif/catch/finally follows,
                // or the while of a do; an expression's braces (a closure, a match) go on to ";"
                $j = next_significant($tokens, $k, $close);
                $follow = $j < $close ? tok_id($tokens[$j]) : null;
                $continues = in_array($follow, [T_ELSE, T_ELSEIF, T_CATCH, T_FINALLY], true)
                    || ($follow === T_WHILE && tok_id($tokens[$start]) === T_DO);
                if (!$continues) {
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
        if ($id === T_STRING_VARNAME) {
            $out[] = ['$' . $tokens[$k][1], 'read', $k];       // "${v}" in a string reads $v
            continue;
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
        if (in_array($prev, ['&', T_AMPERSAND_FOLLOWED_BY_VAR_OR_VARARG], true)) {
            $kind = 'ref';      // `as &$v`, `use (&$v)`, `f(&$v)`: bound by reference
        } elseif ($asDepth !== null) {
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
        } elseif (!$sub && in_array($prev, ['(', ','], true) && in_array($next, [',', ')'], true)
                  && call_argument($tokens, $sig, $s)) {
            $kind = 'update';   // passed as it is to a call, which may take it by reference
        } else {
            $kind = 'read';
        }
        $out[] = [$name, $kind, $k];
    }
    return $out;
}

/** The significant index of the bracket or parenthesis enclosing significant index $s, or null. */
function enclosing(array $tokens, array $sig, int $s): ?int
{
    $depth = 0;
    for ($b = $s - 1; $b >= 0; $b--) {
        $v = tok_id($tokens[$sig[$b]]);
        if (in_array($v, [']', ')', '}'], true)) {
            $depth++;
        } elseif (in_array($v, ['[', '(', '{', T_CURLY_OPEN, T_DOLLAR_OPEN_CURLY_BRACES], true)) {
            if ($depth === 0) {
                return $b;
            }
            $depth--;
        }
    }
    return null;
}

/** The significant index of the bracket closing the one opened at significant index $o. */
function closing(array $tokens, array $sig, int $o): ?int
{
    $depth = 0;
    for ($e = $o; $e < count($sig); $e++) {
        $v = tok_id($tokens[$sig[$e]]);
        if (in_array($v, ['[', '(', '{', T_CURLY_OPEN, T_DOLLAR_OPEN_CURLY_BRACES], true)) {
            $depth++;
        } elseif (in_array($v, [']', ')', '}'], true)) {
            $depth--;
            if ($depth === 0) {
                return $e;
            }
        }
    }
    return null;
}

/** Whether the "[" at significant index $o indexes what precedes it (`$a[..]`, `f()[..]`), not a list. */
function subscript(array $tokens, array $sig, int $o): bool
{
    $prev = $o > 0 ? tok_id($tokens[$sig[$o - 1]]) : null;
    return in_array($prev, [T_VARIABLE, ']', ')', '}', T_STRING, T_CONSTANT_ENCAPSED_STRING, T_NAME_QUALIFIED,
                            T_NAME_FULLY_QUALIFIED, T_NAME_RELATIVE], true);
}

/** Whether the variable at significant index $s sits in a `[...] = ` or `list(...) = ` target,
 * however deeply nested (`[[$a], $b] = ...`). */
function destructured(array $tokens, array $sig, int $s): bool
{
    for ($o = enclosing($tokens, $sig, $s); $o !== null; $o = enclosing($tokens, $sig, $o)) {
        $v = tok_id($tokens[$sig[$o]]);
        $list = ($v === '[' && !subscript($tokens, $sig, $o)) || ($v === '(' && $o > 0 && tok_id($tokens[$sig[$o - 1]]) === T_LIST);
        if (!$list) {
            return false;
        }
        $c = closing($tokens, $sig, $o);
        $next = $c !== null && $c + 1 < count($sig) ? tok_id($tokens[$sig[$c + 1]]) : null;
        if ($next === '=') {
            return true;
        }
        if (!in_array($next, [',', ']', ')', T_DOUBLE_ARROW], true)) {
            return false;
        }
    }
    return false;
}

/** Whether the "(" or "," before significant index $s belongs to a function or method call's arguments. */
function call_argument(array $tokens, array $sig, int $s): bool
{
    $o = enclosing($tokens, $sig, $s);
    if ($o === null || tok_id($tokens[$sig[$o]]) !== '(' || $o === 0) {
        return false;
    }
    $before = tok_id($tokens[$sig[$o - 1]]);
    return in_array($before, [T_STRING, T_NAME_QUALIFIED, T_NAME_FULLY_QUALIFIED, T_NAME_RELATIVE, T_VARIABLE, ')',
                              ']', T_STATIC, T_NEW], true);
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

// loop builtins' arguments that are outputs (by reference), by position from 0: not inputs
const OUTPUT_ARGS = ['preg_match' => [2], 'preg_match_all' => [2], 'preg_replace' => [4],
                     'preg_replace_callback' => [4], 'str_replace' => [3], 'str_ireplace' => [3],
                     'similar_text' => [2], 'sscanf' => [2, 3, 4, 5, 6, 7, 8, 9]];

/** The variables tokens $a..$b bind afresh: foreach's targets, closures' and arrow functions' parameters. */
function bound_in(array $tokens, int $a, int $b): array
{
    $sig = significant($tokens, $a, $b);
    $out = [];
    foreach ($sig as $s => $k) {
        $id = tok_id($tokens[$k]);
        $from = null;
        if ($id === T_AS) {
            $from = $s + 1;
        } elseif (($id === T_FUNCTION || $id === T_FN) && isset($sig[$s + 1]) && tok_id($tokens[$sig[$s + 1]]) === '(') {
            $from = $s + 2;
        }
        if ($from === null) {
            continue;
        }
        for ($t = $from, $depth = 0; isset($sig[$t]); $t++) {
            $u = tok_id($tokens[$sig[$t]]);
            if ($u === '(' || $u === '[') {
                $depth++;
            } elseif ($u === ')' || $u === ']') {
                if ($depth-- === 0) {
                    break;
                }
            } elseif ($u === T_VARIABLE) {
                $out[$tokens[$sig[$t]][1]] = true;
            }
        }
    }
    return $out;
}

/**
 * Per call of one of `$names` in tokens $a..$b: the variables its argument list reads (its
 * output arguments, OUTPUT_ARGS, left out; a variable in `"${v}"` counted).
 */
function loop_arguments(array $tokens, int $a, int $b, array $names): array
{
    $sig = significant($tokens, $a, $b);
    $out = [];
    foreach ($sig as $s => $k) {
        $t = $tokens[$k];
        $next = $s + 1 < count($sig) ? $sig[$s + 1] : null;
        $prev = $s > 0 ? tok_id($tokens[$sig[$s - 1]]) : null;
        $name = is_array($t) ? strtolower(ltrim($t[1], '\\')) : '';
        if (!in_array(tok_id($t), [T_STRING, T_NAME_FULLY_QUALIFIED], true) || $next === null
            || tok_id($tokens[$next]) !== '(' || !in_array($name, $names, true)
            || in_array($prev, [T_OBJECT_OPERATOR, T_NULLSAFE_OBJECT_OPERATOR, T_DOUBLE_COLON, T_FUNCTION, T_NEW], true)) {
            continue;
        }
        $named = [];
        $position = 0;
        for ($i = $next + 1, $depth = 1; $i <= $b && $depth > 0; $i++) {
            $id = tok_id($tokens[$i]);
            $depth += in_array($id, ['(', '[', '{', T_CURLY_OPEN, T_DOLLAR_OPEN_CURLY_BRACES], true) ? 1
                : (in_array($id, [')', ']', '}'], true) ? -1 : 0);
            if ($id === ',' && $depth === 1) {
                $position++;
            } elseif (in_array($position, OUTPUT_ARGS[$name] ?? [], true)) {
                continue;
            } elseif ($id === T_VARIABLE) {
                $named[$tokens[$i][1]] = true;
            } elseif ($id === T_STRING_VARNAME) {
                $named['$' . $tokens[$i][1]] = true;
            }
        }
        $out[] = $named;
    }
    return $out;
}

// builtins that read or set variables no name in the code shows
const INDIRECT = ['func_get_args', 'func_get_arg', 'func_num_args', 'get_defined_vars', 'extract', 'compact',
                  'parse_str', 'get_called_class'];
const SUPERGLOBALS = ['$GLOBALS', '$_SERVER', '$_GET', '$_POST', '$_COOKIE', '$_REQUEST', '$_SESSION', '$_ENV',
                      '$_FILES'];
// builtins whose result is made from their arguments alone (and constants, and files read):
// by name, then by prefix
const PURE = ['explode', 'implode', 'join', 'trim', 'ltrim', 'rtrim', 'strtolower', 'strtoupper', 'ucfirst',
              'lcfirst', 'ucwords', 'sprintf', 'vsprintf', 'number_format', 'strtr', 'strlen', 'strrev',
              'substr', 'substr_count', 'nl2br', 'wordwrap', 'chunk_split', 'htmlspecialchars', 'htmlentities',
              'html_entity_decode', 'strip_tags', 'addslashes', 'stripslashes', 'quotemeta', 'chr', 'ord',
              'count', 'sizeof', 'in_array', 'range', 'sort', 'rsort', 'usort', 'uasort', 'uksort', 'asort',
              'arsort', 'ksort', 'krsort', 'natsort', 'natcasesort', 'shuffle', 'min', 'max', 'abs', 'round',
              'floor', 'ceil', 'pow', 'sqrt', 'intdiv', 'fmod', 'intval', 'floatval', 'strval', 'boolval',
              'settype', 'gettype', 'json_decode', 'json_encode', 'serialize', 'hash', 'md5', 'sha1', 'crc32',
              'base64_encode', 'base64_decode', 'bin2hex', 'hex2bin', 'dechex', 'hexdec', 'decbin', 'bindec',
              'octdec', 'decoct', 'base_convert', 'urlencode', 'urldecode', 'rawurlencode', 'rawurldecode',
              'http_build_query', 'parse_url', 'pathinfo', 'basename', 'dirname', 'constant', 'defined',
              'iterator_to_array', 'current', 'key', 'reset', 'end', 'next', 'prev', 'each', 'list',
              'file', 'file_get_contents', 'parse_ini_file', 'parse_ini_string', 'is_file', 'is_dir',
              'file_exists', 'levenshtein', 'similar_text', 'soundex', 'metaphone', 'nl_langinfo', 'iconv',
              'utf8_encode', 'utf8_decode', 'lcg_value', 'version_compare', 'checkdate', 'mktime', 'gmmktime'];
const PURE_PREFIXES = ['str', 'array_', 'preg_', 'is_'];

function pure_builtin(string $name): bool
{
    $name = strtolower(ltrim($name, '\\'));
    foreach (['mb_', 'ctype_', 'iconv', 'grapheme_'] as $ext) {
        if (str_starts_with($name, $ext)) {
            return true;        // an extension's, which this writer (php -n) does not load
        }
    }
    if (str_contains($name, '\\') || !function_exists($name)
        || !(new ReflectionFunction($name))->isInternal()) {
        return false;           // namespaced, or not a builtin of PHP's core
    }
    if (in_array($name, PURE, true)) {
        return true;
    }
    foreach (PURE_PREFIXES as $p) {
        if (str_starts_with($name, $p)) {
            return true;
        }
    }
    return false;
}

/** The line of token $k (a one-character token has none of its own). */
function line_of(array $tokens, int $k): int
{
    for (; $k >= 0; $k--) {
        if (is_array($tokens[$k])) {
            return $tokens[$k][2];
        }
    }
    return 0;
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
// what reaches the call's arguments or the caller's variables without naming them: refused whole
foreach (significant($tokens, $site['open'], $site['close']) as $k) {
    $t = $tokens[$k];
    $id = tok_id($t);
    if ($id === T_STRING && in_array(strtolower($t[1]), INDIRECT, true)) {
        refuse("its body calls {$t[1]} (line {$t[2]}), which reads or sets variables no name shows");
    }
    if ($id === '$' || $id === T_EVAL) {
        refuse('its body uses a variable variable or eval (line ' . line_of($tokens, $k) . ')');
    }
}
// statics the body writes outside their declaration change from call to call; globals may
// change between calls whatever this function does
$staticWrites = [];
$aliased = [];                              // bound by reference somewhere: changed through another name
foreach ($body as $i => [$a, $b]) {
    $first = tok_id($tokens[$a]);
    foreach (uses($tokens, $a, $b) as [$name, $kind]) {
        if ($kind !== 'read' && !($first === T_STATIC && $kind === 'write')) {
            $staticWrites[$name][$i] = true;
        }
        if ($kind === 'ref') {
            $aliased[$name] = true;
        }
    }
}
$varying = array_fill_keys($call, true) + $aliased;    // variables whose value may depend on the call
$fromArgs = array_fill_keys($site['params'], true);   // variables made from the call's arguments
$statics = [];
$setup = null;
foreach ($body as $i => [$a, $b]) {
    $used = uses($tokens, $a, $b);
    $first = tok_id($tokens[$a]);
    if ($first === T_GLOBAL) {
        foreach ($used as [$name]) {
            $varying[$name] = true;
        }
        continue;
    }
    if ($first === T_STATIC && next_significant($tokens, $a, $b + 1) <= $b
        && tok_id($tokens[next_significant($tokens, $a, $b + 1)]) === T_VARIABLE) {
        foreach ($used as [$name, $kind]) {
            $statics[$name] = true;
        }
        continue;
    }
    $inputs = [];
    foreach ($used as [$name, $kind]) {
        if ($kind === 'read' || $kind === 'ref' || $kind === 'update') {
            $inputs[$name] = true;
        }
    }
    $found = calls_one_of($tokens, $a, $b, $loop);
    $changing = $varying;
    foreach ($statics as $name => $_) {
        if (array_diff_key($staticWrites[$name] ?? [], [$i => true])) {
            $changing[$name] = true;        // a static written elsewhere in the body
        }
    }
    $depends = array_intersect_key($inputs, $changing);
    if ($found !== null) {
        // every call of a loop builtin in it reads something made from the arguments (not a
        // variable the statement binds afresh), and no later statement calls one: the loop works
        // on the call's data
        $fed = [];
        $later = false;
        foreach (array_slice($body, $i + 1, null, true) as [$c, $d]) {
            $later = $later || calls_one_of($tokens, $c, $d, $loop) !== null;
        }
        $fresh = bound_in($tokens, $a, $b);
        foreach ($later ? [] : loop_arguments($tokens, $a, $b, $loop) as $named) {
            $made = array_diff_key(array_intersect_key($named, $fromArgs), $fresh);
            if (!$made) {
                $fed = [];
                break;
            }
            $fed += $made;
        }
        if ($fed) {
            // the premise of the finding is false: the loop's work is made from the arguments
            refuse('the statement calling ' . $found . ' on line ' . line_of($tokens, $a) . ' passes it '
                   . implode(', ', array_keys($fed)) . ', made from the call\'s arguments: the loop\'s work '
                   . 'depends on the call, it is not a setup', ['fed_by_arguments' => array_keys($fed)]);
        }
        if ($depends) {
            refuse('the statement calling ' . $found . ' on line ' . line_of($tokens, $a) . ' reads '
                   . implode(', ', array_keys($depends)) . ', which depends on the call');
        }
        $setup = [$i, $a, $b, $used, $found];
        break;
    }
    if ($depends) {
        foreach ($used as [$name]) {
            $varying[$name] = true;         // anything the statement touches may now hold the call's data
        }
    }
    if (array_intersect_key($inputs, $fromArgs)) {
        foreach ($used as [$name]) {
            $fromArgs[$name] = true;
        }
    } elseif ($first === T_VARIABLE && ($eq = next_significant($tokens, $a, $b + 1)) <= $b
              && tok_id($tokens[$eq]) === '=') {
        unset($fromArgs[$tokens[$a][1]]);       // `$v = ...` of nothing the call made: no longer the call's
    }
}
if ($setup === null) {
    refuse('no top-level statement of its body calls ' . implode(', ', $loop));
}
[$index, $a, $b, $used, $found] = $setup;
$line = line_of($tokens, $a);
foreach ($used as [$name, $kind]) {
    if ($kind !== 'read' && isset(array_flip($call)[$name])) {
        refuse("the setup statement (line $line) writes into $name, "
               . ($name === '$this' ? 'the object' : 'a parameter') . ': that would happen on the first call only');
    }
    if (in_array($name, SUPERGLOBALS, true) && $kind !== 'into') {
        refuse("the setup statement (line $line) reads $name, which may change between calls");
    }
}
$sig = significant($tokens, $a, $b);
foreach ($sig as $n => $k) {
    $id = tok_id($tokens[$k]);
    $bad = [T_RETURN => 'returns', T_ECHO => 'prints', T_PRINT => 'prints', T_INLINE_HTML => 'prints',
            T_YIELD => 'yields', T_YIELD_FROM => 'yields', T_GOTO => 'jumps (goto)', T_GLOBAL => 'declares globals',
            T_UNSET => 'unsets variables', T_INCLUDE => 'includes a file', T_EXIT => 'exits',
            T_INCLUDE_ONCE => 'includes a file', T_REQUIRE => 'includes a file', T_REQUIRE_ONCE => 'includes a file',
            T_NEW => 'makes an object (kept and shared by every later call)', T_CLONE => 'clones an object',
            T_THROW => 'throws'];
    $next = $n + 1 < count($sig) ? tok_id($tokens[$sig[$n + 1]]) : null;
    $prev = $n > 0 ? tok_id($tokens[$sig[$n - 1]]) : null;
    if ($id === T_STATIC) {
        $why = $next === T_DOUBLE_COLON ? 'uses static:: (late static binding: the class differs between calls)'
            : ($next === T_FUNCTION || $next === T_FN ? null : 'declares statics');
        if ($why !== null) {
            refuse("the setup statement (line $line) $why (line " . line_of($tokens, $k) . ')');
        }
    }
    if (isset($bad[$id])) {
        refuse("the setup statement (line $line) {$bad[$id]} (line " . line_of($tokens, $k) . '): running it once would change that');
    }
    if ($next !== '(' || in_array($prev, [T_FUNCTION, T_FN], true)) {
        continue;
    }
    // a call: only builtins that return what their arguments make, and closures written in it
    if (in_array($prev, [T_OBJECT_OPERATOR, T_NULLSAFE_OBJECT_OPERATOR, T_DOUBLE_COLON], true) || $id === T_VARIABLE
        || $id === ')' || $id === ']') {
        refuse("the setup statement (line $line) calls a method or a callable (line " . line_of($tokens, $k)
               . '), whose effects and results may differ from call to call');
    }
    if (in_array($id, [T_STRING, T_NAME_FULLY_QUALIFIED, T_NAME_QUALIFIED], true) && !pure_builtin($tokens[$k][1])) {
        refuse("the setup statement (line $line) calls {$tokens[$k][1]} (line " . line_of($tokens, $k)
               . '), which is not one of the builtins known to return only what their arguments make');
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
