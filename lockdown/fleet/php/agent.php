<?php
/**
 * lockdown's fleet agent (docs/fleet.md): an auto_prepend_file for production pools.
 *
 * Per request: host, pool, route (script and normalised path), method, status, wall and CPU
 * time, peak memory, mysqlnd's statement count (mysqli and PDO alike), and Excimer stacks at a
 * low sampling rate. Everything is sent after the response is released (fastcgi_finish_request),
 * to a Redis stream with XADD and an approximate MAXLEN, with short timeouts. When Redis is
 * slow or down the request is not affected: the record is counted as lost in a local file and
 * the count is sent with the next record that gets through; a send whose reply timed out is
 * noted by the record's `rid` instead, since Redis may have taken it (the reader decides).
 * A file named `off` in the state directory turns the agent off at the next request, without a restart.
 *
 * Configured by the pool's environment (`lockdown agent snippet` prints the lines):
 *   LOCKDOWN_FLEET_REDIS   tcp://HOST:PORT or unix:///PATH (required; unset: the agent does nothing)
 *   LOCKDOWN_FLEET_AUTH    Redis password (optional)
 *   LOCKDOWN_FLEET_STREAM  stream name (default lockdown:fleet)
 *   LOCKDOWN_FLEET_POOL    pool name (default the stream's)
 *   LOCKDOWN_FLEET_HOST    host name (default gethostname())
 *   LOCKDOWN_FLEET_STATE   directory for the `off` switch and the `lost` count (writable by the workers)
 *   LOCKDOWN_FLEET_PERIOD  Excimer's sampling period in seconds (default 0.05)
 *   LOCKDOWN_FLEET_MAXLEN  approximate stream length kept (default 1000000)
 *   LOCKDOWN_FLEET_TIMEOUT connect and read timeout in seconds (default 0.05)
 */
namespace LockdownFleet;

final class Agent
{
    private static $start;
    private static $ru;
    private static $db;
    private static $prof;
    /** Unsure losses kept by rid at most; older ones count as sure (see parseLost). */
    private const MAX_UNSURE = 64;

    public static function begin(): void
    {
        $state = (string) \getenv('LOCKDOWN_FLEET_STATE');
        if ($state !== '' && \is_file($state . '/off')) {
            return;
        }
        self::$start = \hrtime(true);
        self::$ru = \getrusage();
        self::$db = \function_exists('mysqli_get_client_stats') ? \mysqli_get_client_stats() : null;
        if (\class_exists('ExcimerProfiler', false)) {
            $p = new \ExcimerProfiler();
            $p->setPeriod((float) (\getenv('LOCKDOWN_FLEET_PERIOD') ?: 0.05));
            $p->setEventType(\EXCIMER_REAL);
            $p->setMaxDepth(100);
            $p->start();
            self::$prof = $p;
        }
        // registered again from the first shutdown function: it runs after the app's own
        \register_shutdown_function(static function (): void {
            \register_shutdown_function([self::class, 'finish']);
        });
    }

    public static function finish(): void
    {
        try {
            // the response is released first: the client never waits for what follows
            $status = \http_response_code();
            if (\function_exists('fastcgi_finish_request')) {
                \fastcgi_finish_request();
            }
            $record = self::record($status === false ? 0 : (int) $status);
            self::send($record);
        } catch (\Throwable $e) {
            self::lost(1);
        }
    }

    private static function record(int $status): array
    {
        $wall = (\hrtime(true) - self::$start) / 1e9;
        $ru = \getrusage();
        $cpu = ($ru['ru_utime.tv_sec'] - self::$ru['ru_utime.tv_sec'])
            + ($ru['ru_utime.tv_usec'] - self::$ru['ru_utime.tv_usec']) / 1e6
            + ($ru['ru_stime.tv_sec'] - self::$ru['ru_stime.tv_sec'])
            + ($ru['ru_stime.tv_usec'] - self::$ru['ru_stime.tv_usec']) / 1e6;
        $uri = (string) ($_SERVER['REQUEST_URI'] ?? '');
        $stream = (string) (\getenv('LOCKDOWN_FLEET_STREAM') ?: 'lockdown:fleet');
        $r = [
            // the agent's own id: the store's is Redis's, unknown to a send that timed out
            'rid' => \bin2hex(\random_bytes(8)),
            't' => \round(\microtime(true), 3),
            'host' => (string) (\getenv('LOCKDOWN_FLEET_HOST') ?: \gethostname()),
            'pool' => (string) (\getenv('LOCKDOWN_FLEET_POOL') ?: $stream),
            'script' => (string) ($_SERVER['SCRIPT_NAME'] ?? ''),
            'route' => self::normalise($uri),
            'uri' => \substr($uri, 0, 512),
            'method' => (string) ($_SERVER['REQUEST_METHOD'] ?? ''),
            'status' => $status,
            'wall' => \round($wall, 6),
            'cpu' => \round($cpu, 6),
            'mem' => \memory_get_peak_usage(),
        ];
        if (self::$db !== null) {
            $db = \mysqli_get_client_stats();
            $r['stmts'] = ($db['com_query'] - self::$db['com_query'])
                + ($db['com_stmt_execute'] - self::$db['com_stmt_execute']);
        }
        if (self::$prof !== null) {
            self::$prof->stop();
            // an object even when empty: a request shorter than the period may have no sample
            $r['stacks'] = self::folded(self::$prof->getLog()) ?: new \stdClass();
            $r['period'] = (float) (\getenv('LOCKDOWN_FLEET_PERIOD') ?: 0.05);
        }
        return $r;
    }

    /**
     * A path with its variable parts replaced (numbers by {n}, long hex or uuid ids by {id}),
     * and the query's keys kept with their values (a front controller routes by them) when a
     * value is a short word, else replaced the same way or by {s}.
     */
    private static function normalise(string $uri): string
    {
        $path = (string) \parse_url($uri, \PHP_URL_PATH);
        $path = \preg_replace('~/[0-9a-f]{16,}(?=/|$)|/[0-9a-f-]{36}(?=/|$)~i', '/{id}', $path);
        $path = \preg_replace('~/\d+(?=/|$)~', '/{n}', $path);
        $query = (string) \parse_url($uri, \PHP_URL_QUERY);
        if ($query === '') {
            return $path;
        }
        $parts = [];
        foreach (\explode('&', $query) as $pair) {
            [$k, $v] = \array_pad(\explode('=', $pair, 2), 2, null);
            $v = $v === null ? null : (\preg_match('~^\d+$~', $v) ? '{n}'
                : (\preg_match('~^[0-9a-f]{16,}$~i', $v) ? '{id}' : (\preg_match('~^[A-Za-z_-]{1,24}$~', $v) ? $v : '{s}')));
            $parts[] = \substr($k, 0, 32) . ($v === null ? '' : '=' . $v);
        }
        return $path . '?' . \implode('&', \array_slice($parts, 0, 8));
    }

    /** Excimer's log as folded stacks (root first) -> samples; files under the docroot relative. */
    private static function folded($log): array
    {
        $root = \rtrim((string) ($_SERVER['DOCUMENT_ROOT'] ?? ''), '/');
        $out = [];
        foreach ($log as $entry) {
            $names = [];
            foreach (\array_reverse($entry->getTrace()) as $f) {
                $names[] = isset($f['function'])
                    ? (isset($f['class']) ? $f['class'] . '::' . $f['function'] : $f['function'])
                    : ($f['file'] ?? '[unknown]');
            }
            $key = \implode(';', $names);
            if ($root !== '') {
                $key = \str_replace($root . '/', '', $key);
            }
            $out[$key] = ($out[$key] ?? 0) + $entry->getEventCount();
        }
        return $out;
    }

    private static function send(array $record): void
    {
        $state = (string) \getenv('LOCKDOWN_FLEET_STATE');
        [$pending, $unsure] = $state !== '' ? self::takeLost($state) : [0, []];
        if ($pending > 0) {
            $record['lost'] = $pending;
        }
        if ($unsure) {
            $record['unsure'] = $unsure;
        }
        $written = false;
        try {
            $redis = self::connect();
            $stream = (string) (\getenv('LOCKDOWN_FLEET_STREAM') ?: 'lockdown:fleet');
            $maxlen = (int) (\getenv('LOCKDOWN_FLEET_MAXLEN') ?: 1000000);
            $json = \json_encode($record, \JSON_UNESCAPED_SLASHES | \JSON_INVALID_UTF8_SUBSTITUTE);
            // from here a failure (a read that timed out) may come after Redis took the entry
            $written = true;
            $id = $redis->xAdd($stream, '*', ['r' => $json], $maxlen, true);
            if (!\is_string($id) || $id === '') {
                $written = false;              // an error reply: the entry was not added
                throw new \RuntimeException('XADD refused');
            }
        } catch (\Throwable $e) {
            if ($written) {
                // maybe delivered: lost only if no record with this rid reaches the store; what it
                // carried is kept too, and the reader counts each unsure rid once
                $unsure[] = [$record['rid'], 1 + $pending];
                self::lost(0, $unsure);
            } else {
                self::lost(1 + $pending, $unsure);
            }
        }
    }

    private static function connect(): \Redis
    {
        $where = (string) \getenv('LOCKDOWN_FLEET_REDIS');
        $timeout = (float) (\getenv('LOCKDOWN_FLEET_TIMEOUT') ?: 0.05);
        $redis = new \Redis();
        $u = \parse_url($where);
        // persistent: one connection per worker, authenticated when it is made (the context's
        // `auth`), not again on every request: AUTH's round trip had doubled the send's cost
        $auth = (string) \getenv('LOCKDOWN_FLEET_AUTH');
        $context = $auth !== '' ? ['auth' => $auth] : [];
        $ok = ($u['scheme'] ?? '') === 'unix'
            ? $redis->pconnect($u['path'], 0, $timeout, 'lockdown-fleet', 0, $timeout, $context)
            : $redis->pconnect($u['host'] ?? '127.0.0.1', (int) ($u['port'] ?? 6379), $timeout,
                'lockdown-fleet', 0, $timeout, $context);
        if (!$ok) {
            throw new \RuntimeException('no connection');
        }
        return $redis;
    }

    /**
     * The records lost so far, taken out of the state file: [count lost for sure, [[rid, n], ...]
     * for sends that failed after the entry may have reached Redis: n records are lost unless
     * a record with that rid is in the store]. One line per entry: `N` or `RID N`.
     */
    private static function takeLost(string $state): array
    {
        $file = $state . '/lost';
        if (!@\filesize($file)) {
            return [0, []];
        }
        $f = @\fopen($file, 'c+');
        if ($f === false || !\flock($f, \LOCK_EX)) {
            return [0, []];
        }
        [$count, $unsure] = self::parseLost((string) \stream_get_contents($f));
        \ftruncate($f, 0);
        \fclose($f);
        return [$count, $unsure];
    }

    private static function parseLost(string $text): array
    {
        $count = 0;
        $unsure = [];
        foreach (\preg_split('~\R~', \trim($text)) as $line) {
            $f = \preg_split('~\s+~', \trim($line));
            if (\count($f) === 1 && \ctype_digit($f[0])) {
                $count += (int) $f[0];
            } elseif (\count($f) === 2 && \ctype_xdigit($f[0]) && \ctype_digit($f[1])) {
                $unsure[] = [$f[0], (int) $f[1]];
            }
        }
        // a long slow spell must not make every record carry thousands of rids: the oldest
        // become sure losses (an upper bound, as before this distinction)
        while (\count($unsure) > self::MAX_UNSURE) {
            $count += \array_shift($unsure)[1];
        }
        return [$count, $unsure];
    }

    /** `n` records lost for sure and `unsure` ones, added to the state file under a lock. */
    private static function lost(int $n, array $unsure = []): void
    {
        $state = (string) \getenv('LOCKDOWN_FLEET_STATE');
        if ($state === '') {
            return;
        }
        $f = @\fopen($state . '/lost', 'c+');
        if ($f === false || !\flock($f, \LOCK_EX)) {
            return;
        }
        [$count, $had] = self::parseLost((string) \stream_get_contents($f));
        $lines = [(string) ($count + $n)];
        foreach (\array_merge($had, $unsure) as [$rid, $k]) {
            $lines[] = $rid . ' ' . $k;
        }
        \ftruncate($f, 0);
        \rewind($f);
        \fwrite($f, \implode("\n", $lines) . "\n");
        \fclose($f);
    }
}

if (\PHP_SAPI !== 'cli' && \getenv('LOCKDOWN_FLEET_REDIS') && \class_exists('Redis', false)) {
    Agent::begin();
}
