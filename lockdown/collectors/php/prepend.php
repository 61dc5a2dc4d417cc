<?php
/*
 * lockdown's per-request capture, loaded with auto_prepend_file by the generated php-fpm pool.
 *
 * It acts only on requests that carry the X-Lockdown-Capture header (sent by lockdown's own
 * driver), so warmup and baseline requests run the application untouched. It must never break
 * the application: every step is guarded, and a failure loses capture data, never a response.
 * Output goes next to this file, in out/ (see docs/bundle-format.md for what becomes of it).
 */
namespace Lockdown\Capture;

final class Capture
{
    private static $cfg;
    private static $id;
    private static $startNs;
    private static $startUnix;
    private static $rusage;
    private static $excimer;
    private static $excimerStartNs;
    private static $xhprof = false;
    private static $marker;
    private static $statementsAtShutdown = null;
    private static $engineStart;
    private static $schedStart;
    private const UNCACHED_MAX = 50;
    private static $errors = [];
    private const ERRORS_MAX = 50;

    public static function begin(): void
    {
        $sched = self::threadCounters();
        $startNs = \hrtime(true);
        $cfg = @\json_decode((string) @\file_get_contents(__DIR__ . '/config.json'), true);
        if (!\is_array($cfg)) {
            return;
        }
        self::$cfg = $cfg;
        self::$startNs = $startNs;
        self::$startUnix = \microtime(true);
        self::$rusage = \getrusage();
        self::$schedStart = $sched;
        self::$engineStart = self::opcacheCounters();
        unset(self::$engineStart['status']);
        self::$engineStart['gc'] = \gc_status();
        $id = (string) ($_SERVER['HTTP_X_LOCKDOWN_REQUEST'] ?? '');
        if (!\preg_match('/^[A-Za-z0-9._-]{1,64}$/', $id)) {
            $id = \getmypid() . '-' . $startNs;
        }
        self::$id = $id;
        \set_error_handler([self::class, 'onError']);
        if (!\headers_sent()) {
            \header('X-Lockdown-Request: ' . $id);
        }
        \register_shutdown_function([self::class, 'shutdown']);
        if (!empty($cfg['excimer']) && \class_exists('ExcimerProfiler', false)) {
            try {
                $p = new \ExcimerProfiler();
                $p->setPeriod($cfg['excimer']['period_s']);
                $p->setEventType($cfg['excimer']['clock'] === 'cpu' ? \EXCIMER_CPU : \EXCIMER_REAL);
                self::$excimerStartNs = \hrtime(true);
                $p->start();
                self::$excimer = $p;
            } catch (\Throwable $e) {
                self::$excimer = null;
            }
        }
        if (isset($cfg['xhprof']) && isset($_SERVER['HTTP_X_LOCKDOWN_XHPROF'])
            && \function_exists('tideways_xhprof_enable')) {
            \tideways_xhprof_enable($cfg['xhprof']['flags']);
            self::$xhprof = true;
        }
    }

    /** Statements this process's mysqlnd connections sent so far (mysqli and PDO alike), or null. */
    private static function clientStatements(): ?int
    {
        if (!\function_exists('mysqli_get_client_stats')) {
            return null;
        }
        $s = \mysqli_get_client_stats();
        return (int) ($s['com_query'] ?? 0) + (int) ($s['com_stmt_execute'] ?? 0);
    }

    /** Runs as the first shutdown function; registers `finish` so it runs after the app's. */
    public static function shutdown(): void
    {
        self::$statementsAtShutdown = self::clientStatements();
        \register_shutdown_function([self::class, 'finish']);
    }

    /**
     * Ends the request's measurement, places the marker, then releases the response before the
     * bookkeeping (folding Excimer stacks, encoding, writing), so the client does not wait for
     * the profiler: at one request at a time that bookkeeping was 1-2% of WordPress's latency.
     * The marker stays before the release: the next request must not start before it.
     */
    public static function finish(): void
    {
        $endNs = \hrtime(true);
        $statementsAtEnd = self::clientStatements();
        $sched = self::threadCounters();
        $ru = \getrusage();
        try {
            $xhprof = self::$xhprof ? \tideways_xhprof_disable() : null;
            if (self::$excimer) {
                self::$excimer->stop();
            }
            $cfg = self::$cfg;
            $processCpu = ($ru['ru_utime.tv_sec'] - self::$rusage['ru_utime.tv_sec']) * 1000000
                + ($ru['ru_utime.tv_usec'] - self::$rusage['ru_utime.tv_usec'])
                + ($ru['ru_stime.tv_sec'] - self::$rusage['ru_stime.tv_sec']) * 1000000
                + ($ru['ru_stime.tv_usec'] - self::$rusage['ru_stime.tv_usec']);
            // The worker thread's own CPU time (schedstat, ns): getrusage() is the process's,
            // which adds Excimer's timer thread, lockdown's cost and not the application's.
            $threadCpu = isset($sched['oncpu'], self::$schedStart['oncpu'])
                ? \intdiv($sched['oncpu'] - self::$schedStart['oncpu'], 1000) : null;
            $cpu = $threadCpu ?? $processCpu;
            $status = \http_response_code();
            $record = [
                'id' => self::$id,
                'pid' => \getmypid(),
                'method' => (string) ($_SERVER['REQUEST_METHOD'] ?? ''),
                'uri' => (string) ($_SERVER['REQUEST_URI'] ?? ''),
                'status' => \is_int($status) ? $status : 0,
                'start_ns' => self::$startNs,
                'end_ns' => $endNs,
                'start_unix' => self::$startUnix,
                'wall_us' => \intdiv($endNs - self::$startNs, 1000),
                'cpu_us' => $cpu,
                'peak_memory' => \memory_get_peak_usage(),
                'xhprof' => $xhprof !== null,
            ];
            if (isset($cfg['db'])) {
                $record += self::dbThreads($cfg['db']);
            }
            $record['sched'] = self::schedState($sched) + ['process_cpu_us' => $processCpu];
            $record['engine'] = self::engineState();
            $e = $record['engine'];
            if (($e['opcache_misses'] ?? 0) > ($e['opcache_misses_at_start'] ?? \PHP_INT_MAX)) {
                [$record['uncached_scripts'], $record['uncached_young']] = self::uncachedScripts();
            }
            if (self::$errors) {
                $record['php_errors'] = \array_values(self::$errors);
            }
            $record['capture_blocking_us'] = \intdiv(\hrtime(true) - $endNs, 1000);
            if (\function_exists('fastcgi_finish_request') && @\fastcgi_finish_request() === false) {
                // already released by the app, before its shutdown functions ran: what they sent
                // was off the response path (a write deferred with fastcgi_finish_request)
                $record['released_early'] = true;
                if ($statementsAtEnd !== null && self::$statementsAtShutdown !== null) {
                    $record['after_release_statements'] = $statementsAtEnd - self::$statementsAtShutdown;
                }
            }
            $stacks = self::$excimer ? self::stacks() : null;
            $out = __DIR__ . '/out';
            $lost = [];
            if ($xhprof !== null && @\file_put_contents("$out/xhprof/" . self::$id . '.json',
                    \json_encode($xhprof, \JSON_PARTIAL_OUTPUT_ON_ERROR)) === false) {
                $lost[] = 'xhprof';
                $record['xhprof'] = false;
            }
            if ($stacks !== null && @\file_put_contents("$out/excimer.jsonl", \json_encode([
                    'request' => self::$id, 'pid' => $record['pid'], 'start_ns' => self::$excimerStartNs]
                    + $stacks, \JSON_UNESCAPED_SLASHES | \JSON_INVALID_UTF8_SUBSTITUTE) . "\n",
                    \FILE_APPEND | \LOCK_EX) === false) {
                $lost[] = 'excimer';
            }
            $record['capture_us'] = \intdiv(\hrtime(true) - $endNs, 1000);
            $line = \json_encode($record, \JSON_UNESCAPED_SLASHES | \JSON_INVALID_UTF8_SUBSTITUTE) . "\n";
            if (@\file_put_contents("$out/requests.jsonl", $line, \FILE_APPEND | \LOCK_EX) === false) {
                $lost[] = 'request';
            }
            if ($lost) {
                @\error_log('lockdown capture: could not write ' . \implode(', ', $lost) . ' for request '
                    . self::$id . " to $out");
            }
        } catch (\Throwable $e) {
            @\error_log('lockdown capture: ' . $e->getMessage());
        }
    }

    /**
     * The request's PHP warnings, notices and deprecations, counted by (type, file, line,
     * message), with the function that raised them (the first user function on the stack: an
     * include or a builtin is where, not who). Installed first in the request, so it sees what
     * PHP itself would log until the application installs a handler of its own (which then
     * takes them: such an app logs them itself). Errors silenced with @ or left out of
     * error_reporting are not counted: they are not logged. Returns false, so that PHP's own
     * handling, its log included, goes on unchanged. At most ERRORS_MAX distinct ones.
     */
    public static function onError(int $type, string $message, string $file = '', int $line = 0): bool
    {
        if (!(\error_reporting() & $type)) {
            return false;
        }
        $key = "$type:$file:$line:$message";
        if (isset(self::$errors[$key])) {
            self::$errors[$key]['count']++;
        } elseif (\count(self::$errors) < self::ERRORS_MAX) {
            self::$errors[$key] = ['type' => $type, 'message' => \substr($message, 0, 2000), 'file' => $file,
                'line' => $line, 'function' => self::raisedIn(\debug_backtrace(\DEBUG_BACKTRACE_IGNORE_ARGS, 8)),
                'count' => 1];
        }
        return false;
    }

    /** The first user function in a backtrace taken in the error handler, or main(). */
    private static function raisedIn(array $trace): string
    {
        foreach (\array_slice($trace, 1) as $f) {
            $fn = $f['function'] ?? '';
            if (\in_array($fn, ['include', 'include_once', 'require', 'require_once'], true)) {
                continue;
            }
            try {
                $internal = isset($f['class']) ? (new \ReflectionMethod($f['class'], $fn))->isInternal()
                    : (new \ReflectionFunction($fn))->isInternal();
            } catch (\Throwable $e) {
                $internal = false;
            }
            if (!$internal) {
                return isset($f['class']) ? $f['class'] . '::' . $fn : $fn;
            }
        }
        return 'main()';
    }

    /**
     * This thread's scheduler counters so far, each null where the kernel does not give it:
     * its time on a CPU and its time runnable but waiting for one, in ns (the first two fields
     * of /proc/thread-self/schedstat), and its voluntary and involuntary context switches
     * (/proc/thread-self/status). The thread's own, not the process's: getrusage() would add
     * Excimer's timer thread, which wakes once per sample. Read right before the request's
     * start and right after its end (about 25 us), so that the difference is the request's own.
     */
    private static function threadCounters(): array
    {
        $out = ['oncpu' => null, 'delay' => null, 'voluntary' => null, 'involuntary' => null];
        $f = @\file_get_contents('/proc/thread-self/schedstat');
        if ($f !== false && \preg_match('/^(\d+) (\d+) \d+/', $f, $m)) {
            $out['oncpu'] = (int) $m[1];
            $out['delay'] = (int) $m[2];
        }
        $f = @\file_get_contents('/proc/thread-self/status');
        if ($f !== false && \preg_match('/^voluntary_ctxt_switches:\s+(\d+)\s+^nonvoluntary_ctxt_switches:\s+(\d+)/m',
                $f, $m)) {
            $out['voluntary'] = (int) $m[1];
            $out['involuntary'] = (int) $m[2];
        }
        return $out;
    }

    /**
     * What the scheduler did to the request's thread (docs/bundle-format.md): the time it was
     * runnable but waiting for a CPU (the run queue: another worker, the database server it just
     * woke, perf), and its context switches, voluntary (it blocked: a statement's reply, the
     * disk, a lock) and involuntary (preempted). Splits "other wait", which the wall and CPU
     * times alone cannot.
     */
    private static function schedState(array $end): array
    {
        $start = self::$schedStart ?? [];
        $out = [];
        foreach (['voluntary' => 'voluntary_switches', 'involuntary' => 'involuntary_switches',
                  'delay' => 'run_delay_us'] as $key => $name) {
            if (isset($start[$key], $end[$key])) {
                $out[$name] = $key === 'delay' ? \intdiv($end[$key] - $start[$key], 1000) : $end[$key] - $start[$key];
            }
        }
        return $out;
    }

    /**
     * OPcache's lookups so far (hits, misses) and its restarts: begin() keeps them so that the
     * request's own lookups are the difference at the end. One opcache_get_status(false) is
     * about 1 us (it walks no scripts). Empty without OPcache or when its API is restricted.
     */
    private static function opcacheCounters(): array
    {
        if (!\function_exists('opcache_get_status')) {
            return [];
        }
        $s = @\opcache_get_status(false);
        if (!\is_array($s)) {
            return [];
        }
        $st = $s['opcache_statistics'] ?? [];
        return ['status' => $s, 'hits' => (int) ($st['hits'] ?? 0), 'misses' => (int) ($st['misses'] ?? 0),
                'blacklist' => (int) ($st['blacklist_misses'] ?? 0),
                'restarts' => (int) ($st['oom_restarts'] ?? 0) + (int) ($st['hash_restarts'] ?? 0)
                    + (int) ($st['manual_restarts'] ?? 0)];
    }

    /**
     * The files this request included that OPcache does not hold, when it missed during the
     * request (never otherwise: a hash lookup per included file), and those of them modified
     * less than opcache.file_update_protection seconds before the request, which OPcache
     * refuses to cache (a file rewritten on every request). Names what the counters only
     * count; a file that is old and still not held did not fit (keys, memory) or is excluded.
     */
    private static function uncachedScripts(): array
    {
        if (!\function_exists('opcache_is_script_cached')) {
            return [[], []];
        }
        $since = (int) ($_SERVER['REQUEST_TIME'] ?? self::$startUnix) - (int) \ini_get('opcache.file_update_protection');
        $all = [];
        $young = [];
        foreach (\get_included_files() as $file) {
            if (!@\opcache_is_script_cached($file)) {
                $all[] = $file;
                $mtime = @\filemtime($file);
                if ($mtime !== false && $mtime > $since) {
                    $young[] = $file;
                }
                if (\count($all) >= self::UNCACHED_MAX) {
                    break;
                }
            }
        }
        return [$all, $young];
    }

    /**
     * The engine's caches as this request leaves them, flat integers (docs/bundle-format.md):
     * the worker's realpath cache in bytes, the cycle collector's runs (gc_status()), and
     * OPcache's shared memory, keys, interned strings, restarts and JIT buffer, with the
     * lookups of this request (counters at its start kept as *_at_start). What the settings
     * alone cannot say: whether a cache is full.
     */
    private static function engineState(): array
    {
        $out = ['realpath_cache_bytes' => \realpath_cache_size()];
        $gc = \gc_status();
        $out += ['gc_runs' => (int) ($gc['runs'] ?? 0), 'gc_collected' => (int) ($gc['collected'] ?? 0),
                 'gc_threshold' => (int) ($gc['threshold'] ?? 0), 'gc_roots' => (int) ($gc['roots'] ?? 0)];
        $gcStart = self::$engineStart['gc'] ?? null;
        if (\is_array($gcStart)) {
            $out['gc_runs_at_start'] = (int) ($gcStart['runs'] ?? 0);
            $out['gc_collected_at_start'] = (int) ($gcStart['collected'] ?? 0);
        }
        $now = self::opcacheCounters();
        if (!$now) {
            return $out;
        }
        $s = $now['status'];
        $mem = $s['memory_usage'] ?? [];
        $str = $s['interned_strings_usage'] ?? [];
        $st = $s['opcache_statistics'] ?? [];
        $out += [
            'opcache_enabled' => (int) (!empty($s['opcache_enabled'])),
            'opcache_cache_full' => (int) (!empty($s['cache_full'])),
            'opcache_restart_pending' => (int) (!empty($s['restart_pending']) || !empty($s['restart_in_progress'])),
            'opcache_used_memory' => (int) ($mem['used_memory'] ?? 0),
            'opcache_free_memory' => (int) ($mem['free_memory'] ?? 0),
            'opcache_wasted_memory' => (int) ($mem['wasted_memory'] ?? 0),
            'opcache_interned_size' => (int) ($str['buffer_size'] ?? 0),
            'opcache_interned_used' => (int) ($str['used_memory'] ?? 0),
            'opcache_interned_free' => (int) ($str['free_memory'] ?? 0),
            'opcache_cached_scripts' => (int) ($st['num_cached_scripts'] ?? 0),
            'opcache_cached_keys' => (int) ($st['num_cached_keys'] ?? 0),
            'opcache_max_cached_keys' => (int) ($st['max_cached_keys'] ?? 0),
            'opcache_hits' => $now['hits'],
            'opcache_misses' => $now['misses'],
            'opcache_blacklist_misses' => (int) ($st['blacklist_misses'] ?? 0),
            'opcache_oom_restarts' => (int) ($st['oom_restarts'] ?? 0),
            'opcache_hash_restarts' => (int) ($st['hash_restarts'] ?? 0),
            'opcache_manual_restarts' => (int) ($st['manual_restarts'] ?? 0),
        ];
        $jit = $s['jit'] ?? [];
        if (!empty($jit['on'])) {
            $out['opcache_jit_buffer_size'] = (int) ($jit['buffer_size'] ?? 0);
            $out['opcache_jit_buffer_free'] = (int) ($jit['buffer_free'] ?? 0);
        }
        $start = self::$engineStart;
        if (isset($start['hits'])) {
            $out['opcache_hits_at_start'] = $start['hits'];
            $out['opcache_misses_at_start'] = $start['misses'];
            $out['opcache_restarts_at_start'] = $start['restarts'];
            $out['opcache_blacklist_misses_at_start'] = $start['blacklist'];
        }
        return $out;
    }

    /**
     * Excimer samples as [ns since profiler start, weight, stack index]; stacks folded
     * root..leaf, each distinct one stored once. Excimer takes a sample at the next function
     * call after its timer fires, so time at the end of the main script (its last builtin,
     * output, destructors) lands on the first function called after it: this class's
     * shutdown(), or finish() after the app's own shutdown functions. Such frames are named
     * for where the time was, not for lockdown, which does almost nothing there.
     */
    private static function stacks(): array
    {
        $p = self::$excimer;
        $index = [];
        $samples = [];
        foreach ($p->getLog() as $entry) {
            $names = [];
            foreach (\array_reverse($entry->getTrace()) as $f) {
                if (isset($f['closure_line'])) {
                    $names[] = '{closure:' . ($f['file'] ?? '') . '(' . $f['closure_line'] . ')}';
                } elseif (($f['class'] ?? '') === self::class) {
                    $names[] = '[end of request]';
                } elseif (isset($f['function'])) {
                    $names[] = isset($f['class']) ? $f['class'] . '::' . $f['function'] : $f['function'];
                } else {
                    $names[] = $f['file'] ?? '[unknown]';
                }
            }
            $key = \implode(';', $names);
            if (!isset($index[$key])) {
                $index[$key] = \count($index);
            }
            $samples[] = [(int) \round($entry->getTimestamp() * 1e9), $entry->getEventCount(), $index[$key]];
        }
        return ['stacks' => \array_keys($index), 'samples' => $samples];
    }

    /**
     * Which MariaDB connections did this request use? The worker's own TCP sockets to the
     * server give local ports; the server's processlist maps ports to thread ids, which the
     * slow log carries. The query doubles as an ordering marker in the slow log.
     */
    private static function dbThreads(array $db): array
    {
        $ports = empty($db['resolve_ports']) ? [] : self::dbPorts((int) $db['port']);
        try {
            if (self::$marker === null) {
                $m = \mysqli_init();
                if (!@$m->real_connect('p:' . $db['host'], $db['user'], $db['password'], '', $db['port'],
                        $db['socket'] ?: null)) {
                    throw new \RuntimeException('marker connection: ' . \mysqli_connect_error());
                }
                self::$marker = $m;
            }
            $m = self::$marker;
            $threads = [];
            // SHOW PROCESSLIST, filtered here: a fifth of the server time of a SELECT on
            // information_schema.PROCESSLIST (44 against 199 us idle; 0.6-0.8 ms under load).
            // Overlapping requests: this worker's connections, by client port. One request at a
            // time: every connection to the application's database still open is this request's.
            $res = @$m->query('SHOW /*lockdown-capture ' . self::$id . '*/ PROCESSLIST');
            if ($res === false) {
                throw new \RuntimeException('marker query: ' . $m->error);
            }
            $byPort = !empty($db['resolve_ports']);
            $wanted = \array_flip($ports);
            foreach ($res->fetch_all(\MYSQLI_ASSOC) as $row) {
                $id = (int) $row['Id'];
                if ($id === $m->thread_id) {
                    continue;
                }
                if ($byPort) {
                    $colon = \strrchr((string) $row['Host'], ':');
                    if ($colon !== false && isset($wanted[(int) \substr($colon, 1)])) {
                        $threads[] = $id;
                    }
                } elseif ((string) $row['db'] === (string) ($db['app_db'] ?? '')) {
                    $threads[] = $id;
                }
            }
            return ['db_ports' => $ports, 'db_threads' => $threads, 'marker_thread' => $m->thread_id];
        } catch (\Throwable $e) {
            self::$marker = null;
            return ['db_ports' => $ports, 'db_threads' => null, 'db_error' => $e->getMessage()];
        }
    }

    /**
     * Local ports of this worker's open TCP connections to the server's port. Asked of the
     * sockets themselves (getpeername/getsockname through FFI, about 10 us a socket) when the
     * pool enables FFI; otherwise found in /proc/self/net/tcp, whose read walks every socket
     * of the host and cost 6-50 ms a request once earlier connections lay in TIME_WAIT.
     */
    private static function dbPorts(int $serverPort): array
    {
        $fds = [];
        foreach (@\scandir('/proc/self/fd') ?: [] as $fd) {
            if ($fd !== '.' && $fd !== '..') {
                $fds[] = (int) $fd;
            }
        }
        $ffi = self::socketCalls();
        if ($ffi !== null) {
            $ports = [];
            foreach ($fds as $fd) {
                if (self::socketPort($ffi, $fd, true) === $serverPort
                        && ($local = self::socketPort($ffi, $fd, false)) !== null) {
                    $ports[] = $local;
                }
            }
            return $ports;
        }
        return self::dbPortsFromProc($fds, $serverPort);
    }

    /** libc's getsockname and getpeername, or null where FFI is off (ffi.enable) or absent. */
    private static function socketCalls(): ?array
    {
        static $calls = false;
        if ($calls === false) {
            $calls = null;
            $on = \strtolower((string) \ini_get('ffi.enable'));
            if (\class_exists('FFI', false) && ($on === '1' || $on === 'true' || $on === 'on')) {
                try {
                    $lib = \FFI::cdef('typedef unsigned int socklen_t;
                        int getsockname(int fd, void *addr, socklen_t *len);
                        int getpeername(int fd, void *addr, socklen_t *len);', 'libc.so.6');
                    $calls = [$lib, $lib->new('unsigned char[128]'), $lib->new('socklen_t')];
                } catch (\Throwable $e) {
                    $calls = null;
                }
            }
        }
        return $calls;
    }

    /** The port of an AF_INET or AF_INET6 socket's own (or its peer's) address; else null. */
    private static function socketPort(array $calls, int $fd, bool $peer): ?int
    {
        [$lib, $buf, $len] = $calls;
        $len->cdata = 128;
        $rc = $peer ? $lib->getpeername($fd, \FFI::addr($buf), \FFI::addr($len))
            : $lib->getsockname($fd, \FFI::addr($buf), \FFI::addr($len));
        $family = $rc === 0 ? $buf[0] | ($buf[1] << 8) : -1;   // sa_family_t, little-endian
        return $family === 2 || $family === 10 ? ($buf[2] << 8) | $buf[3] : null;
    }

    /** The fallback: the rows of /proc/self/net/tcp{,6} whose inode is one of these fds'. */
    private static function dbPortsFromProc(array $fds, int $serverPort): array
    {
        $inodes = [];
        foreach ($fds as $fd) {
            $link = @\readlink("/proc/self/fd/$fd");
            if ($link !== false && \strncmp($link, 'socket:[', 8) === 0) {
                $inodes[\substr($link, 8, -1)] = true;
            }
        }
        $ports = [];
        foreach ($inodes ? ['/proc/self/net/tcp', '/proc/self/net/tcp6'] : [] as $table) {
            foreach (@\file($table) ?: [] as $i => $row) {
                $f = \preg_split('/\s+/', \trim($row));
                if ($i === 0 || \count($f) < 10 || !isset($inodes[$f[9]])) {
                    continue;
                }
                if (\hexdec(\substr(\strrchr($f[2], ':'), 1)) === $serverPort) {
                    $ports[] = \hexdec(\substr(\strrchr($f[1], ':'), 1));
                }
            }
        }
        return $ports;
    }
}

if (\PHP_SAPI !== 'cli' && isset($_SERVER['HTTP_X_LOCKDOWN_CAPTURE'])) {
    Capture::begin();
}
