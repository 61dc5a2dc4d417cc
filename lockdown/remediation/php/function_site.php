<?php
/*
 * Shared by memoize.php and defer.php: one function's definition found with PHP's tokenizer
 * (by the line of its `function` keyword and its name), its body's extent and its own return
 * statements (not those of closures, functions or classes nested in it).
 */

function refuse(string $why, array $more = []): void
{
    echo json_encode(['refused' => $why] + $more, JSON_UNESCAPED_SLASHES), "\n";
    exit(0);
}

function tok_id($t)
{
    return is_array($t) ? $t[0] : $t;
}

function next_significant(array $tokens, int $i, int $n): int
{
    for ($i++; $i < $n && is_array($tokens[$i]) && in_array($tokens[$i][0], [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT], true); $i++);
    return $i;
}

/** Index of the bracket matching the one at $open. */
function matching(array $tokens, int $open): int
{
    $depth = 0;
    for ($i = $open, $n = count($tokens); $i < $n; $i++) {
        $id = tok_id($tokens[$i]);
        if (in_array($id, ['(', '[', '{', T_CURLY_OPEN, T_DOLLAR_OPEN_CURLY_BRACES], true)) {
            $depth++;
        } elseif (in_array($id, [')', ']', '}'], true)) {
            $depth--;
            if ($depth === 0) {
                return $i;
            }
        }
    }
    refuse('unbalanced brackets');
}

/**
 * The request on stdin (the protocol of memoize.php, defer.php and setup_once.php), the text of
 * its file and the site of its function, which must have a body: [$in, $code, $site].
 */
function requested_site(): array
{
    $in = json_decode(stream_get_contents(STDIN), true);
    $code = @file_get_contents($in['file']);
    if ($code === false) {
        refuse("cannot read {$in['file']}");
    }
    $site = function_site($code, (int) $in['line'], $in['name']);
    if ($site['abstract'] || $site['open'] === null) {
        refuse('it has no body');
    }
    return [$in, $code, $site];
}

/**
 * The site of `$name` defined on `$line` of `$code`: ['tokens', 'offsets', 'fn' (index of
 * `function`), 'static', 'by_ref', 'type' (the return type's text), 'open' / 'close' (indexes of
 * the body's braces), 'params' (the parameters' names, "$x"), 'returns' ([[start offset, end
 * offset, line]] of each own `return EXPR`),
 * 'bare_returns' (own `return;` count), 'output' (first own output token [name, line] or null),
 * 'yields' (bool), 'by_ref_param' (bool)]. Refuses (exits) when there is no such definition.
 */
function function_site(string $code, int $line, string $name): array
{
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
    $fn = null;
    $byRef = false;
    for ($i = 0; $i < $n; $i++) {
        if (tok_id($tokens[$i]) !== T_FUNCTION || $tokens[$i][2] !== $line) {
            continue;
        }
        $j = next_significant($tokens, $i, $n);
        $byRef = false;
        if (in_array(tok_id($tokens[$j]), ['&', T_AMPERSAND_NOT_FOLLOWED_BY_VAR_OR_VARARG, T_AMPERSAND_FOLLOWED_BY_VAR_OR_VARARG], true)) {
            $byRef = true;
            $j = next_significant($tokens, $j, $n);
        }
        if (tok_id($tokens[$j]) === T_STRING && strcasecmp($tokens[$j][1], $name) === 0) {
            $fn = $i;
            break;
        }
    }
    if ($fn === null) {
        refuse("no definition of $name on line $line");
    }
    $static = false;
    for ($k = $fn - 1; $k >= 0; $k--) {
        $id = tok_id($tokens[$k]);
        if ($id === T_STATIC) {
            $static = true;
        } elseif (!in_array($id, [T_WHITESPACE, T_COMMENT, T_DOC_COMMENT, T_PUBLIC, T_PROTECTED, T_PRIVATE, T_FINAL], true)) {
            break;
        }
    }
    $abstract = tok_id($tokens[$k]) === T_ABSTRACT;
    $depth = 0;
    $byRefParam = false;
    $params = [];
    for ($k = $j + 1; $k < $n; $k++) {
        $id = tok_id($tokens[$k]);
        if ($id === '(') {
            $depth++;
        } elseif ($id === ')') {
            $depth--;
            if ($depth === 0) {
                break;
            }
        } elseif ($id === T_AMPERSAND_FOLLOWED_BY_VAR_OR_VARARG && $depth === 1) {
            $byRefParam = true;
        } elseif ($id === T_VARIABLE && $depth === 1) {
            $params[] = $tokens[$k][1];
        }
    }
    $type = '';
    for ($k++; $k < $n && $tokens[$k] !== '{' && $tokens[$k] !== ';'; $k++) {
        $type .= is_array($tokens[$k]) ? $tokens[$k][1] : $tokens[$k];
    }
    $site = ['tokens' => $tokens, 'offsets' => $offsets, 'fn' => $fn, 'static' => $static, 'by_ref' => $byRef,
             'abstract' => $abstract, 'by_ref_param' => $byRefParam, 'params' => $params, 'type' => $type,
             'open' => null,
             'close' => null, 'returns' => [], 'bare_returns' => 0, 'output' => null, 'yields' => false];
    if ($k >= $n || $tokens[$k] === ';') {
        return $site;
    }
    $site['open'] = $k;
    return body_of($site, $n);
}

/** The body's own returns, output and yields; its closing brace. */
function body_of(array $site, int $n): array
{
    $tokens = $site['tokens'];
    $offsets = $site['offsets'];
    $open = $site['open'];
    $depth = 0;
    $foreign = [];                    // depths at which a nested closure/function/class body opened
    $pendingForeign = false;
    $prev = null;                     // the previous significant token (Foo::class is no class)
    $ownOutput = [T_ECHO, T_PRINT, T_INLINE_HTML, T_OPEN_TAG_WITH_ECHO, T_CLOSE_TAG];
    for ($k = $open; $k < $n; $k++) {
        $t = $tokens[$k];
        $id = tok_id($t);
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
                $site['close'] = $k;
                return $site;
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
            $site['yields'] = true;
        }
        if (in_array($id, $ownOutput, true) && $site['output'] === null) {
            $site['output'] = [token_name($id), $t[2]];
        }
        if ($id === T_RETURN) {
            $start = next_significant($tokens, $k, $n);
            if ($tokens[$start] === ';') {
                $site['bare_returns']++;
                continue;
            }
            $level = 0;
            for ($e = $start; $e < $n; $e++) {
                $u = tok_id($tokens[$e]);
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
            $site['returns'][] = [$offsets[$start], $offsets[$e], $t[2]];
            $k = $e;
        }
    }
    refuse('the body does not end');
}

/**
 * `$code` with `$lines` inserted at the top of the site's body, on lines of their own indented
 * as the body's first line (a leading tab in a line is one level of the file's own indentation),
 * and the other `$edits` ([offset, text]) applied.
 */
function insert_at_top(string $code, array $site, array $lines, array $edits): string
{
    $offsets = $site['offsets'];
    $after = $offsets[$site['open']] + 1;
    $lineStart = strrpos(substr($code, 0, $offsets[$site['fn']]), "\n");
    $outer = preg_match('/^[ \t]*/', substr($code, $lineStart === false ? 0 : $lineStart + 1), $m) ? $m[0] : '';
    $indent = preg_match('/\A[^\n]*\n(?:[ \t]*\n)*([ \t]+)\S/', substr($code, $after), $m) && strlen($m[1]) > strlen($outer)
        ? $m[1] : $outer . "\t";
    $unit = strlen($indent) > strlen($outer) && strncmp($indent, $outer, strlen($outer)) === 0
        ? substr($indent, strlen($outer)) : "\t";  // one level of the file's own indentation
    $block = implode('', array_map(
        fn($l) => $indent . preg_replace_callback('/^\t+/', fn($m) => str_repeat($unit, strlen($m[0])), $l) . "\n",
        $lines));
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
    return $code;
}

/** Writes `$code` to `$out` and says so on stdout (the protocol of memoize.php and defer.php). */
function written(string $code, string $out): void
{
    if (@file_put_contents($out, $code) !== strlen($code)) {
        refuse("cannot write $out");
    }
    echo json_encode(['written' => $out], JSON_UNESCAPED_SLASHES), "\n";
}
