<?php
/*
 * A per-request memo for one function (remediation/memoize.py): the generic fix for a
 * repeated-call finding the argument probe confirmed, when no known recipe applies.
 *
 * stdin: {"file": path, "line": n, "name": "function name", "method": bool, "out": path}
 * stdout: {"written": "out"} (the file's new text, byte for byte, is in `out`), or
 *         {"refused": "why this function cannot be memoized"}
 *
 * The function is found by its `function` keyword's line and its name, with PHP's tokenizer.
 * At the top of its body a memo lookup is inserted, keyed on the serialized arguments (and
 * static::class for a static method); each `return EXPR;` of its own (not of closures or
 * classes nested in it) becomes `return $lockdown_memo[$lockdown_key ?? ''] = (EXPR);`.
 * Calls with an object, closure or resource among their arguments are not remembered (their
 * result goes to the '' slot, which is never read: a serialized key is never empty).
 * Refused: instance methods (the result may depend on the object), by-reference returns or
 * parameters, generators, void/never functions, and bodies that print output.
 */
$in = json_decode(stream_get_contents(STDIN), true);
$code = @file_get_contents($in['file']);
if ($code === false) {
    refuse("cannot read {$in['file']}");
}
try {
    $tokens = token_get_all($code, TOKEN_PARSE);
} catch (\Throwable $e) {
    refuse('the file does not parse: ' . $e->getMessage());
}
$n = count($tokens);
$offsets = [];
$pos = 0;
foreach ($tokens as $i => $t) {
    $offsets[$i] = $pos;
    $pos += strlen(is_array($t) ? $t[1] : $t);
}

function refuse(string $why): void
{
    echo json_encode(['refused' => $why], JSON_UNESCAPED_SLASHES), "\n";
    exit(0);
}

function id($t)
{
    return is_array($t) ? $t[0] : $t;
}

function next_significant(array $tokens, int $i, int $n): int
{
    for ($i++; $i < $n && is_array($tokens[$i]) && in_array($tokens[$i][0], [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT], true); $i++);
    return $i;
}

// the declaration: `function` on the given line, followed by the name
$fn = null;
for ($i = 0; $i < $n; $i++) {
    if (id($tokens[$i]) !== T_FUNCTION || $tokens[$i][2] !== (int) $in['line']) {
        continue;
    }
    $j = next_significant($tokens, $i, $n);
    $byRef = false;
    if (in_array(id($tokens[$j]), ['&', T_AMPERSAND_NOT_FOLLOWED_BY_VAR_OR_VARARG, T_AMPERSAND_FOLLOWED_BY_VAR_OR_VARARG], true)) {
        $byRef = true;
        $j = next_significant($tokens, $j, $n);
    }
    if (id($tokens[$j]) === T_STRING && strcasecmp($tokens[$j][1], $in['name']) === 0) {
        $fn = $i;
        break;
    }
}
if ($fn === null) {
    refuse("no definition of {$in['name']} on line {$in['line']}");
}
if ($byRef) {
    refuse('it returns by reference');
}
// modifiers before `function`
$static = false;
for ($k = $fn - 1; $k >= 0; $k--) {
    $id = id($tokens[$k]);
    if ($id === T_STATIC) {
        $static = true;
    } elseif (!in_array($id, [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT, T_PUBLIC, T_PROTECTED, T_PRIVATE, T_FINAL], true)) {
        break;
    }
}
if ($in['method'] && !$static) {
    refuse('an instance method: its result may depend on the object, which a memo keyed on the arguments cannot see');
}
if (id($tokens[$k]) === T_ABSTRACT) {
    refuse('an abstract method has no body');
}
// the parameter list, the return type, then the body's "{"
$depth = 0;
for ($k = $j + 1; $k < $n; $k++) {
    $id = id($tokens[$k]);
    if ($id === '(') {
        $depth++;
    } elseif ($id === ')') {
        $depth--;
        if ($depth === 0) {
            break;
        }
    } elseif ($id === T_AMPERSAND_FOLLOWED_BY_VAR_OR_VARARG && $depth === 1) {
        refuse('it takes a parameter by reference');
    }
}
$type = '';
for ($k++; $k < $n && $tokens[$k] !== '{' && $tokens[$k] !== ';'; $k++) {
    $type .= is_array($tokens[$k]) ? $tokens[$k][1] : $tokens[$k];
}
if ($k >= $n || $tokens[$k] === ';') {
    refuse('it has no body');
}
if (preg_match('/\b(void|never)\b/i', $type)) {
    refuse('it returns nothing (' . trim($type, " \t\n:") . ')');
}
$open = $k;

// the body: its own returns; nested closures, functions and classes are foreign
$edits = [];                      // [offset, text to insert]
$returns = 0;                     // own returns with a value
$depth = 0;                       // braces inside the body
$foreign = [];                    // depths at which a nested closure/function/class body opened
$pendingForeign = false;
$prev = null;                     // the previous significant token (Foo::class is no class)
$ownOutput = [T_ECHO, T_PRINT, T_INLINE_HTML, T_OPEN_TAG_WITH_ECHO, T_CLOSE_TAG];
for ($k = $open; $k < $n; $k++) {
    $t = $tokens[$k];
    $id = id($t);
    if ($id === '{' || $id === T_CURLY_OPEN || $id === T_DOLLAR_OPEN_CURLY_BRACES) {
        $depth++;
        if ($id === '{' && $pendingForeign) {
            $foreign[] = $depth;
            $pendingForeign = false;
        }
        continue;
    }
    if ($id === '}') {
        if ($foreign && end($foreign) === $depth) {
            array_pop($foreign);
        }
        $depth--;
        if ($depth === 0) {
            $close = $k;
            break;
        }
        continue;
    }
    if ($k === $open) {
        continue;
    }
    $afterColons = $prev === T_DOUBLE_COLON;
    if (!in_array($id, [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT], true)) {
        $prev = $id;
    }
    if (!$afterColons && (in_array($id, [T_FUNCTION, T_CLASS, T_TRAIT, T_INTERFACE], true)
                          || (defined('T_ENUM') && $id === T_ENUM))) {
        $pendingForeign = true;   // its body is the next "{" (T_FN has no braces of its own)
        continue;
    }
    if ($foreign) {
        continue;
    }
    if ($id === T_YIELD || $id === T_YIELD_FROM) {
        refuse('a generator (yield)');
    }
    if (in_array($id, $ownOutput, true)) {
        refuse('it prints output (' . token_name($id) . ' on line ' . $t[2] . '), which a memo would print once');
    }
    if ($id === T_RETURN) {
        $start = next_significant($tokens, $k, $n);
        if ($tokens[$start] === ';') {
            continue;             // `return;`: nothing to remember
        }
        // the expression ends at the ";" (or closing tag) outside any bracket of its own
        $level = 0;
        for ($e = $start; $e < $n; $e++) {
            $u = id($tokens[$e]);
            if (in_array($u, ['(', '[', '{', T_CURLY_OPEN, T_DOLLAR_OPEN_CURLY_BRACES], true)) {
                $level++;
            } elseif (in_array($u, [')', ']', '}'], true)) {
                $level--;
            } elseif (($u === ';' || $u === T_CLOSE_TAG) && $level === 0) {
                break;
            }
        }
        if ($e >= $n) {
            refuse("the return on line {$t[2]} does not end");
        }
        $edits[] = [$offsets[$start], '$lockdown_memo[ $lockdown_key ?? \'\' ] = ( '];
        $edits[] = [$offsets[$e], ' )'];
        $returns++;
        $k = $e;
    }
}
if (!isset($close)) {
    refuse('the body does not end');
}
if ($returns === 0) {
    refuse('it has no return with a value');
}

// the lookup, on new lines after "{", indented as the body's first line
$after = $offsets[$open] + 1;
$lineStart = strrpos(substr($code, 0, $offsets[$fn]), "\n");
$outer = preg_match('/^[ \t]*/', substr($code, $lineStart === false ? 0 : $lineStart + 1), $m) ? $m[0] : '';
$indent = preg_match('/\A[^\n]*\n(?:[ \t]*\n)*([ \t]+)\S/', substr($code, $after), $m) && strlen($m[1]) > strlen($outer)
    ? $m[1] : $outer . "\t";
$key = $static ? 'serialize( array( static::class, $lockdown_args ) )' : 'serialize( $lockdown_args )';
$lookup = [
    '// lockdown: remembered for the request, keyed on the arguments (the argument probe saw',
    '// most calls repeat an earlier argument list). Calls with an object, closure or resource',
    '// among their arguments are not remembered.',
    'static $lockdown_memo = array();',
    '$lockdown_args = func_get_args();',
    '$lockdown_key  = \'\';',
    'array_walk_recursive(',
    "\t\$lockdown_args,",
    "\tfunction ( \$value ) use ( &\$lockdown_key ) {",
    "\t\tif ( null !== \$value && ! is_scalar( \$value ) ) {",
    "\t\t\t\$lockdown_key = null;",
    "\t\t}",
    "\t}",
    ');',
    'if ( null !== $lockdown_key ) {',
    "\t\$lockdown_key = $key;",
    "\tif ( array_key_exists( \$lockdown_key, \$lockdown_memo ) ) {",
    "\t\treturn \$lockdown_memo[ \$lockdown_key ];",
    "\t}",
    '}',
];
$unit = strlen($indent) > strlen($outer) && strncmp($indent, $outer, strlen($outer)) === 0
    ? substr($indent, strlen($outer)) : "\t";  // one level of the file's own indentation
$block = implode('', array_map(
    fn($l) => $indent . preg_replace_callback('/^\t+/', fn($m) => str_repeat($unit, strlen($m[0])), $l) . "\n",
    $lookup));
$eol = strpos($code, "\n", $after);
if ($eol !== false && trim(substr($code, $after, $eol - $after)) === '') {
    $edits[] = [$eol + 1, $block];            // on the lines after the "{" line
} else {
    $edits[] = [$after, "\n" . $block];       // code follows "{" on its line: it moves below
}
usort($edits, fn($a, $b) => $b[0] <=> $a[0]);
foreach ($edits as [$at, $text]) {
    $code = substr($code, 0, $at) . $text . substr($code, $at);
}
if (@file_put_contents($in['out'], $code) !== strlen($code)) {
    refuse("cannot write {$in['out']}");
}
echo json_encode(['written' => $in['out']], JSON_UNESCAPED_SLASHES), "\n";
