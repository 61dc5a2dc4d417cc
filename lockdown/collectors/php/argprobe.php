<?php
/*
 * lockdown's argument probe, loaded with auto_prepend_file in a probe run only (arg_probe.py).
 *
 * Each candidate function of the copy served has one call inserted at the top of its body:
 * \LockdownArgProbe::hit(N, \func_get_args(), isset($this) ? $this : null). For requests that
 * carry X-Lockdown-Probe it counts, per function, the calls and the distinct (object, argument
 * list) pairs: xhprof keeps no arguments, so this is what tells a memoizable repeat (the same
 * arguments again) from a function called on different data. Objects are told apart by
 * identity, through a WeakMap (spl_object_id is reused once an object is freed, which would
 * make different objects look the same), so two equal but distinct objects count as
 * different: the probe errs towards "not a repeat".
 */
final class LockdownArgProbe
{
    private static $on = null;
    private static $calls = [];
    private static $keys = [];
    private static $argKeys = [];
    private static $ids;
    private static $next = 0;

    public static function hit(int $fn, array $args, $self): void
    {
        if (self::$on === null) {
            self::$on = isset($_SERVER['HTTP_X_LOCKDOWN_PROBE']);
            if (self::$on) {
                self::$ids = new \WeakMap();
                register_shutdown_function([self::class, 'write']);
            }
        }
        if (!self::$on) {
            return;
        }
        try {
            $a = self::fingerprint($args, 0);
            $k = ($self === null ? '-' : self::fingerprint($self, 0)) . '|' . $a;
        } catch (\Throwable $e) {
            $a = $k = 'x' . self::$next++;    // cannot fingerprint: count it as different
        }
        self::$calls[$fn] = (self::$calls[$fn] ?? 0) + 1;
        self::$keys[$fn][strlen($k) > 64 ? md5($k) : $k] = true;
        self::$argKeys[$fn][strlen($a) > 64 ? md5($a) : $a] = true;
    }

    private static function fingerprint($v, int $depth): string
    {
        if (is_object($v)) {
            if (!isset(self::$ids[$v])) {
                self::$ids[$v] = self::$next++;
            }
            return 'o' . self::$ids[$v];
        }
        if (is_array($v)) {
            if ($depth > 6) {
                return 'x' . self::$next++;   // too deep to compare: different
            }
            $s = '[';
            foreach ($v as $k => $x) {
                $s .= (is_int($k) ? $k : 's' . strlen($k) . ':' . $k) . '=' . self::fingerprint($x, $depth + 1) . ',';
            }
            return strlen($s) > 512 ? 'h' . md5($s) : $s . ']';
        }
        if (is_string($v)) {
            return strlen($v) > 64 ? 'h' . md5($v) : 's' . strlen($v) . ':' . $v;
        }
        if (is_resource($v)) {
            return 'r' . get_resource_id($v);
        }
        return gettype($v)[0] . var_export($v, true);
    }

    public static function write(): void
    {
        $out = [];
        foreach (self::$calls as $fn => $n) {
            $out[$fn] = ['calls' => $n, 'distinct' => count(self::$keys[$fn]),
                         'distinct_arguments' => count(self::$argKeys[$fn])];
        }
        $line = json_encode(['request' => (string) ($_SERVER['HTTP_X_LOCKDOWN_REQUEST'] ?? ''),
                             'uri' => (string) ($_SERVER['REQUEST_URI'] ?? ''),
                             'functions' => (object) $out]) . "\n";
        @file_put_contents(__DIR__ . '/out/probe.jsonl', $line, FILE_APPEND | LOCK_EX);
    }
}
