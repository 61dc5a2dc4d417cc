<?php
/*
 * A memo for one function (remediation/memoize.py): the generic fix for a repeated call or a
 * repeated query whose sender lockdown located, and the generated static cache of a getter.
 *
 * stdin: {"file": path, "line": n, "name": "function name", "method": bool, "out": path,
 *         "scope": "request" | "object" | "persistent",
 *         "cache": {"name": file name, "ttl": seconds, "version": PHP expression or ""}}
 * stdout: {"written": "out"} (the file's new text, byte for byte, is in `out`), or
 *         {"refused": "why this function cannot be memoized"}
 *
 * Scopes:
 * - request: remembered for the request in a static array, keyed on the serialized arguments
 *   (and static::class for a static method); instance methods are refused.
 * - object: as request, but an instance method is allowed, with one memo per object (a
 *   WeakMap keyed on $this): for a method whose repeats the capture saw on one object.
 * - persistent: remembered across requests in a generated PHP array file next to the patched
 *   file (`.lockdown-cache/NAME`), which OPcache keeps in memory; an instance method's key also
 *   holds the object's scalar properties (a locale, a root path). The file is dropped and
 *   rebuilt when `version` (e.g. a file's mtime) or the TTL period changes. Only results made
 *   of scalars and arrays are stored.
 * At the top of the body a lookup is inserted; each own `return EXPR;` becomes
 * `return $lockdown_memo[$lockdown_key ?? ''] = (EXPR);`. Calls with an object, closure or
 * resource among their arguments are not remembered (the '' slot, never read).
 * Refused: by-reference returns or parameters, generators, void/never functions, and bodies
 * that print output.
 */
require __DIR__ . '/function_site.php';

$in = json_decode(stream_get_contents(STDIN), true);
$code = @file_get_contents($in['file']);
if ($code === false) {
    refuse("cannot read {$in['file']}");
}
$scope = $in['scope'] ?? 'request';
$site = function_site($code, (int) $in['line'], $in['name']);
if ($site['by_ref']) {
    refuse('it returns by reference');
}
$instance = $in['method'] && !$site['static'];
if ($instance && $scope === 'request') {
    refuse('an instance method: its result may depend on the object, which a memo keyed on the arguments cannot see');
}
if ($site['abstract']) {
    refuse('an abstract method has no body');
}
if ($site['by_ref_param']) {
    refuse('it takes a parameter by reference');
}
if ($site['open'] === null) {
    refuse('it has no body');
}
if (preg_match('/\b(void|never)\b/i', $site['type'])) {
    refuse('it returns nothing (' . trim($site['type'], " \t\n:") . ')');
}
if ($site['yields']) {
    refuse('a generator (yield)');
}
if ($site['output'] !== null) {
    refuse("it prints output ({$site['output'][0]} on line {$site['output'][1]}), which a memo would print once");
}
if (!$site['returns']) {
    refuse('it has no return with a value');
}
$edits = [];
foreach ($site['returns'] as [$start, $end]) {
    $edits[] = [$start, '$lockdown_memo[ $lockdown_key ?? \'\' ] = ( '];
    $edits[] = [$end, ' )'];
}
$args = [
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
];
if ($scope === 'persistent') {
    $lookup = persistent_lookup($in, $instance, $site['static']);
} elseif ($instance) {
    $lookup = array_merge([
        '// lockdown: remembered for the request, one memo per object, keyed on the arguments',
        '// (the capture saw most calls repeat an earlier argument list). Calls with an object,',
        '// closure or resource among their arguments are not remembered.',
        'static $lockdown_memos = null;',
        '$lockdown_memos ??= new \WeakMap();',
        '$lockdown_memo  = $lockdown_memos[ $this ] ??= new \ArrayObject();',
    ], array_slice($args, 1), [
        'if ( null !== $lockdown_key ) {',
        "\t\$lockdown_key = serialize( \$lockdown_args );",
        "\tif ( \$lockdown_memo->offsetExists( \$lockdown_key ) ) {",
        "\t\treturn \$lockdown_memo[ \$lockdown_key ];",
        "\t}",
        '}',
    ]);
} else {
    $key = $site['static'] ? 'serialize( array( static::class, $lockdown_args ) )' : 'serialize( $lockdown_args )';
    $lookup = array_merge([
        '// lockdown: remembered for the request, keyed on the arguments (the capture saw',
        '// most calls repeat an earlier argument list). Calls with an object, closure or resource',
        '// among their arguments are not remembered.',
    ], $args, [
        'if ( null !== $lockdown_key ) {',
        "\t\$lockdown_key = $key;",
        "\tif ( array_key_exists( \$lockdown_key, \$lockdown_memo ) ) {",
        "\t\treturn \$lockdown_memo[ \$lockdown_key ];",
        "\t}",
        '}',
    ]);
}
written(insert_at_top($code, $site, $lookup, $edits), $in['out']);

/** The lookup of the persistent scope: the array file loaded once per request, checked, kept. */
function persistent_lookup(array $in, bool $instance, bool $static): array
{
    $cache = $in['cache'] ?? [];
    $name = preg_replace('/[^A-Za-z0-9_.-]/', '_', (string) ($cache['name'] ?? 'memo')) . '.php';
    $ttl = max(1, (int) ($cache['ttl'] ?? 60));
    $version = trim((string) ($cache['version'] ?? ''));
    $versionExpr = $version === '' ? "(int) ( time() / $ttl )" : "array( (int) ( time() / $ttl ), $version )";
    $state = $instance ? 'array( static::class, array_filter( get_object_vars( $this ), function ( $v ) { return null === $v || is_scalar( $v ); } ), $lockdown_args )'
        : ($static ? 'array( static::class, $lockdown_args )' : '$lockdown_args');
    return [
        '// lockdown: remembered across requests in a generated PHP array file, which OPcache keeps',
        "// in memory. It is rebuilt every $ttl s" . ($version === '' ? '' : ' and when its version changes')
            . '; delete it to drop it at once.',
        '// Only results made of scalars and arrays are stored.',
        'static $lockdown_memo = null;',
        'static $lockdown_loaded = 0;',
        'if ( null === $lockdown_memo ) {',
        "\t\$lockdown_file    = __DIR__ . '/.lockdown-cache/$name';",
        "\t\$lockdown_version = $versionExpr;",
        "\t\$lockdown_memo    = is_file( \$lockdown_file ) ? ( include \$lockdown_file ) : null;",
        "\tif ( ! is_array( \$lockdown_memo ) || ( \$lockdown_memo[\"\\0version\"] ?? null ) !== \$lockdown_version ) {",
        "\t\t\$lockdown_memo = array( \"\\0version\" => \$lockdown_version );",
        "\t}",
        "\t\$lockdown_loaded = count( \$lockdown_memo );",
        "\tregister_shutdown_function(",
        "\t\tfunction () use ( &\$lockdown_memo, &\$lockdown_loaded, \$lockdown_file ) {",
        "\t\t\tunset( \$lockdown_memo[''] );",
        "\t\t\t\$keep = array_filter( \$lockdown_memo, function ( \$v ) {",
        "\t\t\t\t\$plain = true;",
        "\t\t\t\tis_array( \$v ) ? array_walk_recursive( \$v, function ( \$x ) use ( &\$plain ) { \$plain = \$plain && ( null === \$x || is_scalar( \$x ) ); } ) : ( \$plain = null === \$v || is_scalar( \$v ) );",
        "\t\t\t\treturn \$plain;",
        "\t\t\t} );",
        "\t\t\tif ( count( \$keep ) === \$lockdown_loaded ) {",
        "\t\t\t\treturn;",
        "\t\t\t}",
        "\t\t\t@mkdir( dirname( \$lockdown_file ), 0700 );",
        "\t\t\t// merged with the file as it is now (other workers' keys), read past OPcache, under a lock",
        "\t\t\t\$lock = @fopen( \$lockdown_file . '.lock', 'c' );",
        "\t\t\tif ( \$lock ) {",
        "\t\t\t\tflock( \$lock, LOCK_EX );",
        "\t\t\t}",
        "\t\t\tif ( function_exists( 'opcache_invalidate' ) ) {",
        "\t\t\t\t@opcache_invalidate( \$lockdown_file, true );",
        "\t\t\t}",
        "\t\t\t\$now = is_file( \$lockdown_file ) ? ( @include \$lockdown_file ) : null;",
        "\t\t\tif ( is_array( \$now ) && ( \$now[\"\\0version\"] ?? null ) === ( \$keep[\"\\0version\"] ?? null ) ) {",
        "\t\t\t\t\$keep += \$now;",
        "\t\t\t}",
        "\t\t\t\$tmp = \$lockdown_file . '.' . getmypid() . '.tmp';",
        "\t\t\tif ( false !== @file_put_contents( \$tmp, '<?php return ' . var_export( \$keep, true ) . \";\\n\" ) ) {",
        "\t\t\t\t@rename( \$tmp, \$lockdown_file );",
        "\t\t\t\tif ( function_exists( 'opcache_invalidate' ) ) {",
        "\t\t\t\t\t@opcache_invalidate( \$lockdown_file, true );",
        "\t\t\t\t}",
        "\t\t\t}",
        "\t\t\tif ( \$lock ) {",
        "\t\t\t\tflock( \$lock, LOCK_UN );",
        "\t\t\t\tfclose( \$lock );",
        "\t\t\t}",
        "\t\t}",
        "\t);",
        '}',
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
        "\t\$lockdown_key = serialize( $state );",
        "\tif ( array_key_exists( \$lockdown_key, \$lockdown_memo ) ) {",
        "\t\treturn \$lockdown_memo[ \$lockdown_key ];",
        "\t}",
        '}',
    ];
}
