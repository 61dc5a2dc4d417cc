<?php
/*
 * A write moved off the response path (remediation/generate.py, write-on-read): the function
 * that sends the write returns at once, and its body runs in a shutdown function after
 * fastcgi_finish_request() has released the response.
 *
 * stdin: {"file": path, "line": n, "name": "function name", "method": bool, "out": path}
 * stdout: {"written": "out"} or {"refused": "why"}
 *
 * The change in semantics, which the proposal states: the write happens after the page was
 * sent, so the page cannot show its result, and an error in it is logged (error_log) instead
 * of reaching the response. Refused: functions whose callers could use a result (any
 * `return EXPR;` of its own, unless it is declared void), by-reference parameters, generators,
 * bodies that print output.
 */
require __DIR__ . '/function_site.php';

[$in, $code, $site] = requested_site();
if ($site['by_ref_param']) {
    refuse('it takes a parameter by reference: its caller reads what it writes');
}
if ($site['yields']) {
    refuse('a generator (yield)');
}
if ($site['output'] !== null) {
    refuse("it prints output ({$site['output'][0]} on line {$site['output'][1]}), which must reach the page");
}
if ($site['returns'] && !preg_match('/\bvoid\b/i', $site['type'])) {
    refuse('it returns a value (line ' . $site['returns'][0][2] . '), which its callers may use');
}
if (preg_match('/\bnever\b/i', $site['type'])) {
    refuse('it never returns');
}
$name = $in['name'];
$instance = $in['method'] && !$site['static'];
$call = $instance ? "\$this->$name( ...\$lockdown_args )" : ($in['method'] ? "static::$name( ...\$lockdown_args )" : "$name( ...\$lockdown_args )");
$lines = [
    '// lockdown: the write runs after the response was sent (fastcgi_finish_request), not on',
    '// the response path: the page no longer waits for it, cannot show its result, and an error',
    '// in it is logged instead of reaching the page.',
    'static $lockdown_now = false;',
    'if ( ! $lockdown_now ) {',
    "\t\$lockdown_args = func_get_args();",
    "\tregister_shutdown_function(",
    "\t\tfunction () use ( \$lockdown_args, &\$lockdown_now ) {",
    "\t\t\tif ( function_exists( 'fastcgi_finish_request' ) ) {",
    "\t\t\t\tfastcgi_finish_request();",
    "\t\t\t}",
    "\t\t\t\$lockdown_now = true;",
    "\t\t\ttry {",
    "\t\t\t\t$call;",
    "\t\t\t} catch ( \\Throwable \$e ) {",
    "\t\t\t\terror_log( 'lockdown: deferred " . addslashes($name) . ": ' . \$e->getMessage() );",
    "\t\t\t}",
    "\t\t\t\$lockdown_now = false;",
    "\t\t}",
    "\t);",
    "\treturn;",
    '}',
];
written(insert_at_top($code, $site, $lines, []), $in['out']);
