<?php
/*
 * A prefetch for an N+1 loop (remediation/prefetch.py): the method that sends the per-row query
 * gains a sibling that fetches the rows of many keys in one `IN (...)` query, through the
 * same database object, and answers from them; the loop that calls it per row asks for all its
 * keys first.
 *
 * stdin: {"sender": {"file", "line", "name"}, "caller": {"file", "line", "name"}, "key": column,
 *         "batch": {"perRowMethod": "batchMethod", ...}, "out_sender": path, "out_caller": path}
 * stdout: {"written": [out_sender, out_caller]} or {"refused": "why"}
 *
 * What it needs, else it refuses: the sender is an instance method whose body holds one call
 * RECV->M('... KEY = ? ...', [$param]) (one placeholder, the parameter alone in the array), M
 * has a batch sibling in `batch`, and the caller holds `foreach ($rows as ... $row)` whose body
 * calls X->SENDER(...$row['col'] or $row->col...). At run time the prefetch checks itself
 * once: the batch's row for the first key must be identical (===) to what the per-row call
 * returns, else it keeps nothing and every row is fetched as before.
 */
require __DIR__ . '/function_site.php';

$in = json_decode(stream_get_contents(STDIN), true);

function text_of(array $tokens, int $from, int $to): string
{
    $s = '';
    for ($i = $from; $i <= $to; $i++) {
        $s .= is_array($tokens[$i]) ? $tokens[$i][1] : $tokens[$i];
    }
    return $s;
}

/** The receiver expression ending just before token $end ($this->db, self::$db, $db). */
function receiver(array $tokens, int $end): ?array
{
    $i = $end;
    $parts = [T_VARIABLE, T_STRING, T_OBJECT_OPERATOR, T_NULLSAFE_OBJECT_OPERATOR, T_DOUBLE_COLON, T_STATIC];
    while ($i >= 0 && in_array(tok_id($tokens[$i]), $parts, true)) {
        $i--;
    }
    return $i + 1 <= $end ? [$i + 1, $end] : null;
}

/** Top-level arguments of the call whose "(" is at $open: [[from, to], ...]. */
function arguments(array $tokens, int $open, int $close): array
{
    $args = [];
    $start = $open + 1;
    $depth = 0;
    for ($i = $open + 1; $i < $close; $i++) {
        $id = tok_id($tokens[$i]);
        if (in_array($id, ['(', '[', '{', T_CURLY_OPEN, T_DOLLAR_OPEN_CURLY_BRACES], true)) {
            $depth++;
        } elseif (in_array($id, [')', ']', '}'], true)) {
            $depth--;
        } elseif ($id === ',' && $depth === 0) {
            $args[] = [$start, $i - 1];
            $start = $i + 1;
        }
    }
    if ($start <= $close - 1) {
        $args[] = [$start, $close - 1];
    }
    return $args;
}

function squeeze(string $s): string
{
    return preg_replace('/\s+/', '', $s);
}

// -- the sender --------------------------------------------------------------------------------
$scode = @file_get_contents($in['sender']['file']);
if ($scode === false) {
    refuse("cannot read {$in['sender']['file']}");
}
$s = function_site($scode, (int) $in['sender']['line'], $in['sender']['name']);
if ($s['open'] === null || $s['static']) {
    refuse('the sender is not an instance method with a body');
}
$t = $s['tokens'];
$param = null;
for ($i = $s['fn']; $i < $s['open']; $i++) {
    if (tok_id($t[$i]) === T_VARIABLE) {
        $param = $t[$i][1];
        break;
    }
}
if ($param === null) {
    refuse('the sender takes no parameter');
}
$key = $in['key'];
$call = null;
for ($i = $s['open']; $i < $s['close']; $i++) {
    if (tok_id($t[$i]) !== T_CONSTANT_ENCAPSED_STRING) {
        continue;
    }
    $sql = $t[$i][1];
    if (substr_count($sql, '?') !== 1 || !preg_match('/\b' . preg_quote($key, '/') . '\s*=\s*\?/i', $sql)) {
        continue;
    }
    // the call around the literal: back to its "(" at depth 0
    $depth = 0;
    for ($j = $i - 1; $j > $s['open']; $j--) {
        $id = tok_id($t[$j]);
        if (in_array($id, [')', ']'], true)) {
            $depth++;
        } elseif (in_array($id, ['(', '['], true)) {
            if ($depth === 0) {
                break;
            }
            $depth--;
        }
    }
    if (tok_id($t[$j]) !== '(' || tok_id($t[$j - 1]) !== T_STRING || tok_id($t[$j - 2]) !== T_OBJECT_OPERATOR) {
        refuse('the statement is not sent by a method call RECV->method(...)');
    }
    $recv = receiver($t, $j - 3);
    if ($recv === null) {
        refuse('no receiver before the method call');
    }
    $call = ['literal' => $i, 'open' => $j, 'close' => matching($t, $j), 'method' => $t[$j - 1][1], 'recv' => $recv];
    break;
}
if ($call === null) {
    refuse("no literal with `$key = ?` and one placeholder in the sender");
}
$batch = $in['batch'][strtolower($call['method'])] ?? null;
if ($batch === null) {
    refuse("no batch method is known beside {$call['method']}()");
}
$args = arguments($t, $call['open'], $call['close']);
$argText = [];
$litArg = $parArg = null;
foreach ($args as $k => [$a, $b]) {
    $argText[$k] = text_of($t, $a, $b);
    if ($a <= $call['literal'] && $call['literal'] <= $b) {
        $litArg = $k;
    } elseif (in_array(squeeze($argText[$k]), ["[$param]", "array($param)"], true)) {
        $parArg = $k;
    }
}
if ($litArg === null || $parArg === null || squeeze($argText[$litArg]) !== squeeze($t[$call['literal']][1])) {
    refuse("the call's arguments are not the statement's text and [$param]");
}
$recvText = text_of($t, $call['recv'][0], $call['recv'][1]);
$q = $t[$call['literal']][1][0];
[$before, $after] = preg_split('/\b' . preg_quote($key, '/') . '\s*=\s*\?/i', substr($t[$call['literal']][1], 1, -1), 2);
$inList = $q . $before . $key . ' IN (' . $q . " . implode( ', ', array_fill( 0, count( \$lockdown_keys ), '?' ) ) . " . $q . ')' . $after . $q;
$batchArgs = $argText;
$batchArgs[$litArg] = $inList;
$batchArgs[$parArg] = '$lockdown_keys';
$checkArgs = $argText;
$checkArgs[$parArg] = '[ $lockdown_keys[0] ]';
$name = $in['sender']['name'];
$kq = var_export($key, true);
$method = [
    '',
    "\t/** lockdown: generated prefetch for $name(): the rows of many keys in one query, kept for this object. */",
    "\tpublic function lockdown_prefetch_$name( array \$lockdown_keys ): void",
    "\t{",
    "\t\t\$lockdown_keys = array_values( array_unique( array_filter( \$lockdown_keys, function ( \$k ) { return null !== \$k; } ) ) );",
    "\t\tif ( count( \$lockdown_keys ) < 2 || ! method_exists( $recvText, " . var_export($batch, true) . ' ) ) {',
    "\t\t\treturn;",
    "\t\t}",
    "\t\t\$lockdown_rows = $recvText->$batch( " . implode(', ', array_map('trim', $batchArgs)) . ' );',
    "\t\t\$lockdown_map  = array();",
    "\t\tforeach ( (array) \$lockdown_rows as \$lockdown_row ) {",
    "\t\t\t\$k = is_array( \$lockdown_row ) ? ( \$lockdown_row[$kq] ?? null ) : ( is_object( \$lockdown_row ) ? ( \$lockdown_row->$key ?? null ) : null );",
    "\t\t\tif ( null !== \$k ) {",
    "\t\t\t\t\$lockdown_map[ (string) \$k ] = \$lockdown_row;",
    "\t\t\t}",
    "\t\t}",
    "\t\t// checked once: the batch answers the first key as the per-row query does (the same",
    "\t\t// array, or an object of the same class with the same properties)",
    "\t\t\$lockdown_one  = $recvText->{$call['method']}( " . implode(', ', array_map('trim', $checkArgs)) . ' );',
    "\t\t\$lockdown_from = \$lockdown_map[ (string) \$lockdown_keys[0] ] ?? null;",
    "\t\tif ( is_object( \$lockdown_one ) && is_object( \$lockdown_from ) ? \$lockdown_one != \$lockdown_from : \$lockdown_one !== \$lockdown_from ) {",
    "\t\t\treturn;",
    "\t\t}",
    "\t\tself::\$lockdown_prefetched ??= new \\WeakMap();",
    "\t\tself::\$lockdown_prefetched[ \$this ] = \$lockdown_map;",
    "\t}",
];
$lookup = [
    '// lockdown: answered from lockdown_prefetch_' . $name . '() when the loop asked for it first',
    "if ( isset( self::\$lockdown_prefetched[ \$this ] ) && array_key_exists( (string) $param, self::\$lockdown_prefetched[ \$this ] ) ) {",
    "\treturn self::\$lockdown_prefetched[ \$this ][ (string) $param ];",
    '}',
];
// the class's "{" (the last class declaration before the sender) and the method's end
$classOpen = null;
for ($i = $s['fn']; $i >= 0; $i--) {
    if (tok_id($t[$i]) === T_CLASS && (tok_id($t[$i - 1] ?? null) !== T_DOUBLE_COLON)) {
        for ($j = $i; tok_id($t[$j]) !== '{'; $j++);
        $classOpen = $j;
        break;
    }
}
if ($classOpen === null) {
    refuse('no class around the sender');
}
$o = $s['offsets'];
$eol = strpos($scode, "\n", $o[$s['close']]);
$indentUnit = preg_match('/\n([ \t]+)\S/', substr($scode, $o[$classOpen]), $m) ? $m[1] : "\t";
$expand = fn(array $lines) => implode('', array_map(
    fn($l) => ($l === '' ? '' : preg_replace_callback('/^\t+/', fn($mm) => str_repeat($indentUnit, strlen($mm[0])), $l)) . "\n", $lines));
$edits = [
    [$eol === false ? strlen($scode) : $eol + 1, $expand($method)],
    [$o[$classOpen] + 1, "\n" . $expand(["\tprivate static ?\\WeakMap \$lockdown_prefetched = null;"])],
];
$newSender = insert_at_top($scode, $s, $lookup, $edits);

// -- the caller: the loop --------------------------------------------------------------------
$same = realpath($in['caller']['file']) === realpath($in['sender']['file']);
$ccode = $same ? $newSender : @file_get_contents($in['caller']['file']);
if ($ccode === false) {
    refuse("cannot read {$in['caller']['file']}");
}
$c = function_site($ccode, (int) $in['caller']['line'] + ($same ? substr_count($newSender, "\n") - substr_count($scode, "\n") : 0), $in['caller']['name']);
$u = $c['tokens'];
$insert = null;
for ($i = $c['open']; $i < $c['close'] && $insert === null; $i++) {
    if (tok_id($u[$i]) !== T_FOREACH) {
        continue;
    }
    $p = next_significant($u, $i, count($u));
    $close = matching($u, $p);
    $head = squeeze(text_of($u, $p + 1, $close - 1));
    if (!preg_match('/^(\$\w+)as(?:\$\w+=>)?(\$\w+)$/', $head, $hm)) {
        continue;
    }
    [, $list, $row] = $hm;
    $bodyOpen = next_significant($u, $close, count($u));
    $bodyClose = tok_id($u[$bodyOpen]) === '{' ? matching($u, $bodyOpen) : $bodyOpen;
    for ($k = $bodyOpen; $k < $bodyClose; $k++) {
        if (tok_id($u[$k]) !== T_STRING || strcasecmp($u[$k][1], $name) !== 0 || tok_id($u[$k - 1]) !== T_OBJECT_OPERATOR
            || tok_id($u[$k + 1]) !== '(') {
            continue;
        }
        $arg = squeeze(text_of($u, $k + 2, matching($u, $k + 1) - 1));
        $arg = preg_replace('/^\((?:int|string|integer)\)/', '', $arg);
        if (preg_match('/^intval\((.*)\)$/', $arg, $am)) {
            $arg = $am[1];
        }
        $col = null;
        if (preg_match('/^' . preg_quote($row, '/') . '\[([\'"])(\w+)\1\]$/', $arg, $cm)) {
            $col = $cm[2];
        } elseif (preg_match('/^' . preg_quote($row, '/') . '->(\w+)$/', $arg, $cm)) {
            $col = $cm[1];
        }
        $recv = receiver($u, $k - 2);
        if ($col === null || $recv === null) {
            continue;
        }
        $insert = [$c['offsets'][$i], text_of($u, $recv[0], $recv[1]) . "->lockdown_prefetch_$name( array_column( $list, '$col' ) );"];
        break;
    }
}
if ($insert === null) {
    refuse("no foreach over a variable whose body calls ->$name() with a column of its row");
}
$lineStart = strrpos(substr($ccode, 0, $insert[0]), "\n");
$indent = preg_match('/^[ \t]*/', substr($ccode, $lineStart + 1), $im) ? $im[0] : '';
$newCaller = substr($ccode, 0, $insert[0]) . "// lockdown: the loop's rows fetched in one query (generated prefetch)\n" . $indent
    . $insert[1] . "\n" . $indent . substr($ccode, $insert[0]);
if ($same) {
    written($newCaller, $in['out_sender']);
    exit(0);
}
if (@file_put_contents($in['out_sender'], $newSender) !== strlen($newSender)) {
    refuse("cannot write {$in['out_sender']}");
}
written($newCaller, $in['out_caller']);
