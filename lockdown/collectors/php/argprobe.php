<?php
/*
 * lockdown's argument probe, loaded with auto_prepend_file in a probe run only (arg_probe.py).
 *
 * Each candidate function of the copy served has one statement inserted at the top of its body:
 * $__lockdown_probe_call = \LockdownArgProbe::hit(N, \func_get_args(), isset($this) ? $this : null).
 * For requests that carry X-Lockdown-Probe it counts, per function, the calls and the distinct
 * (object, argument list) pairs: xhprof keeps no arguments, so this is what tells a memoizable repeat (the same
 * arguments again) from a function called on different data. Objects are told apart by
 * identity, through a WeakMap (spl_object_id is reused once an object is freed, which would
 * make different objects look the same), so two equal but distinct objects count as
 * different: the probe errs towards "not a repeat".
 *
 * It also times each call: hit() returns a LockdownArgProbeCall that the inserted line keeps
 * in a local variable ($__lockdown_probe_call), so that PHP destroys it when the call returns
 * (or throws), and its destructor adds the call's wall time to the function's total, to its
 * first call's (the first of the request) and to its repeats' (the calls whose pair came
 * earlier: what a per-request cache would answer). The clock starts after the fingerprints
 * are taken, so the probe's own work in hit() is left out of the call it times.
 */
final class LockdownArgProbeCall
{
    public function __construct(private int $fn, private bool $first, private bool $repeat, private int $start)
    {
    }

    public function __destruct()
    {
        LockdownArgProbe::took($this->fn, $this->first, $this->repeat, hrtime(true) - $this->start);
    }
}

final class LockdownArgProbe
{
    private static $on = null;
    private static $calls = [];
    private static $keys = [];
    private static $argKeys = [];
    private static $ns = [];
    private static $ids;
    private static $next = 0;

    public static function hit(int $fn, array $args, $self): ?LockdownArgProbeCall
    {
        if (self::$on === null) {
            self::$on = isset($_SERVER['HTTP_X_LOCKDOWN_PROBE']);
            if (self::$on) {
                self::$ids = new \WeakMap();
                register_shutdown_function([self::class, 'write']);
            }
        }
        if (!self::$on) {
            return null;
        }
        try {
            $a = self::fingerprint($args, 0);
            $k = ($self === null ? '-' : self::fingerprint($self, 0)) . '|' . $a;
        } catch (\Throwable $e) {
            $a = $k = 'x' . self::$next++;    // cannot fingerprint: count it as different
        }
        $first = !isset(self::$calls[$fn]);
        self::$calls[$fn] = (self::$calls[$fn] ?? 0) + 1;
        $k = strlen($k) > 64 ? md5($k) : $k;
        $repeat = isset(self::$keys[$fn][$k]);
        self::$keys[$fn][$k] = true;
        self::$argKeys[$fn][strlen($a) > 64 ? md5($a) : $a] = true;
        return new LockdownArgProbeCall($fn, $first, $repeat, hrtime(true));
    }

    public static function took(int $fn, bool $first, bool $repeat, int $ns): void
    {
        $t = self::$ns[$fn] ?? ['total' => 0, 'first' => 0, 'repeats' => 0, 'timed' => 0];
        $t['total'] += $ns;
        $t['timed']++;
        if ($first) {
            $t['first'] += $ns;
        }
        if ($repeat) {
            $t['repeats'] += $ns;
        }
        self::$ns[$fn] = $t;
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
            $t = self::$ns[$fn] ?? null;
            if ($t !== null && $t['timed'] === $n) {     // a call still running (exit() inside it) is not timed
                $out[$fn] += ['total_us' => intdiv($t['total'], 1000), 'first_us' => intdiv($t['first'], 1000),
                              'repeat_us' => intdiv($t['repeats'], 1000)];
            }
        }
        $line = json_encode(['request' => (string) ($_SERVER['HTTP_X_LOCKDOWN_REQUEST'] ?? ''),
                             'uri' => (string) ($_SERVER['REQUEST_URI'] ?? ''),
                             'functions' => (object) $out]) . "\n";
        @file_put_contents(__DIR__ . '/out/probe.jsonl', $line, FILE_APPEND | LOCK_EX);
    }
}
