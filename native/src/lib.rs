//! `perf script` text -> folded stacks, by the rules of lockdown's pure-Python reference
//! (`fold_perf_text` in lockdown/analyzers/folded.py, which reproduces stackcollapse-perf.pl):
//! the same line-by-line state machine, the same patterns (Python's `re.ASCII` classes written
//! out), and the same cache of tidied frame lines. The input is split on "\n" only, as Perl
//! reads it. Counts are summed in 128 bits; a count that does not fit raises OverflowError and
//! the caller falls back to the reference.
use memchr::memchr;
use pyo3::exceptions::{PyOverflowError, PyUnicodeDecodeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use regex::Regex;
use rustc_hash::FxHashMap;

// \s \S \d \w of Python's re.ASCII; `.` is any character but "\n" in both engines.
#[cfg(test)]
const HEADER: &str = r"^([^ \t\n\r\x0B\x0C].+?)[ \t\n\r\x0B\x0C]+([0-9]+)/*([0-9]+)*[ \t\n\r\x0B\x0C]+";
#[cfg(test)]
const PERIOD_EVENT: &str =
    r":[ \t\n\r\x0B\x0C]*([0-9]+)*[ \t\n\r\x0B\x0C]+([^ \t\n\r\x0B\x0C]+):[ \t\n\r\x0B\x0C]*$";
const STACK_LINE: &str = r"^[ \t\n\r\x0B\x0C]*([0-9A-Za-z_]+)[ \t\n\r\x0B\x0C]*(.+) \((.*)\)";
const OFFSET: &str = r"\+0x[0-9a-f]+$";
const JIT_DSO: &str = r"/tmp/perf-[0-9]+\.map";

#[derive(Clone, Copy)]
struct Options {
    include_pid: bool,
    include_tid: bool,
    annotate_kernel: bool,
    annotate_jit: bool,
    addrs: bool,
    counts: bool,
}

struct Patterns {
    stack_line: Regex,
    offset: Regex,
    jit_dso: Regex,
}

impl Patterns {
    fn new() -> Self {
        let re = |p: &str| Regex::new(p).expect("valid pattern");
        Patterns { stack_line: re(STACK_LINE),
                   offset: re(OFFSET), jit_dso: re(JIT_DSO) }
    }
}

/// A byte range of a line.
type Span = (usize, usize);

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0B | 0x0C)
}

fn digits_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    i
}

fn ws_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_ws(b[i]) {
        i += 1;
    }
    i
}

/// HEADER matched without the regex engine (the backtracker took most of the time): the comm
/// is the shortest text of 2+ characters followed by `\s+(\d+)/*(\d+)*\s+`, and once the
/// whitespace and digits after it are taken whole, nothing given back makes the rest match.
/// Returns the comm's end and the pid's and tid's byte ranges; `tests::header_as_regex` holds it to HEADER.
fn header_match(line: &str) -> Option<(usize, Span, Option<Span>)> {
    let b = line.as_bytes();
    let first = line.chars().next()?;
    if first.is_ascii_whitespace() || first == '\x0B' {
        return None;
    }
    let mut p = first.len_utf8() + 1;
    while p < b.len() {
        if is_ws(b[p]) {
            let d1 = ws_end(b, p);
            let d1_end = digits_end(b, d1);
            if d1_end > d1 {
                let mut q = d1_end;
                while q < b.len() && b[q] == b'/' {
                    q += 1;
                }
                let d2_end = digits_end(b, q);
                if d2_end < b.len() && is_ws(b[d2_end]) {
                    let tid = if d2_end > q { Some((q, d2_end)) } else { None };
                    return Some((p, (d1, d1_end), tid));
                }
            }
        }
        p += 1;
    }
    None
}

/// PERIOD_EVENT searched without the regex engine: the line's last token (trailing whitespace
/// aside) is `EVENT:`, and between the leftmost ":" that works and that token lies
/// `\s*(\d+)*\s+`. Returns (period digits, if any; event) as byte ranges.
fn period_event_match(line: &str) -> Option<(Option<Span>, Span)> {
    let b = line.as_bytes();
    let mut end = b.len();
    while end > 0 && is_ws(b[end - 1]) {
        end -= 1;
    }
    let mut tok = end;
    while tok > 0 && !is_ws(b[tok - 1]) {
        tok -= 1;
    }
    if end < tok + 2 || b[end - 1] != b':' {
        return None;
    }
    for i in 0..tok {
        if b[i] != b':' {
            continue;
        }
        let d = ws_end(b, i + 1);
        let d_end = digits_end(&b[..tok], d); // digits of the token itself are the event's
        if d_end < tok && ws_end(b, d_end) == tok {
            let period = if d_end > d { Some((d, d_end)) } else { None };
            return Some((period, (tok, end - 1)));
        }
        if d_end == d && d == tok && d > i + 1 {
            return Some((None, (tok, end - 1)));
        }
    }
    None
}

fn perl_false(s: Option<&str>) -> bool {
    matches!(s, None | Some("") | Some("0"))
}

/// The root frame of a header (`_root`), from HEADER's groups.
fn root(comm: &str, pid: &str, tid: Option<&str>, o: &Options) -> String {
    let (pid, tid) = if perl_false(tid) { ("?", pid) } else { (pid, tid.unwrap_or("")) };
    let r = if o.include_tid {
        format!("{comm}-{pid}/{tid}")
    } else if o.include_pid {
        format!("{comm}-{pid}")
    } else {
        comm.to_string()
    };
    r.replace(' ', "_")
}

/// Perl's split on "->": trailing empty fields dropped.
fn split_arrow(s: &str) -> Vec<&str> {
    let mut parts: Vec<&str> = s.split("->").collect();
    while parts.last() == Some(&"") {
        parts.pop();
    }
    parts
}

/// `\.\(.*\)\.` (a Go method): ".(" with ")." anywhere after it.
fn go_method(s: &str) -> bool {
    s.find(".(").is_some_and(|i| s[i + 2..].contains(")."))
}

/// `\((?!anonymous namespace\)).*` removed once: cut at the first "(" that does not open
/// "(anonymous namespace)".
fn cut_args(s: &str) -> &str {
    let mut from = 0;
    while let Some(i) = s[from..].find('(') {
        let at = from + i;
        if !s[at + 1..].starts_with("anonymous namespace)") {
            return &s[..at];
        }
        from = at + 1;
    }
    s
}

fn tidy(func: &str, pc: &str, module: &str, is_java: bool, o: &Options) -> String {
    let mut f = if func == "[unknown]" {
        let base = if module != "[unknown]" { module.rsplit('/').next().unwrap_or(module) } else { "unknown" };
        if o.addrs { format!("[{base} <{pc}>]") } else { format!("[{base}]") }
    } else {
        func.to_string()
    };
    f = f.replace(';', ":");
    if !go_method(&f) {
        f = cut_args(&f).to_string();
    }
    f.retain(|c| c != '"' && c != '\'');
    if is_java && f.contains('/') && f.starts_with('L') {
        f.remove(0);
    }
    f
}

/// One frame line -> its tidied names joined by ";" (`_frame_names`); "" when it gives none.
fn frame_names(line: &str, is_java: bool, o: &Options, p: &Patterns) -> String {
    let Some(c) = p.stack_line.captures(line) else { return String::new() };
    let pc = c.get(1).map_or("", |m| m.as_str());
    let module = c.get(3).map_or("", |m| m.as_str());
    let mut rawfunc = c.get(2).map_or("", |m| m.as_str());
    if let Some(m) = p.offset.find(rawfunc) {
        rawfunc = &rawfunc[..m.start()];
    }
    if rawfunc.starts_with('(') {
        return String::new();
    }
    let mut names: Vec<String> = Vec::new();
    for part in split_arrow(rawfunc) {
        let mut f = tidy(part, pc, module, is_java, o);
        if !names.is_empty() {
            if !f.contains("_[i]") {
                f.push_str("_[i]");
            }
        } else if o.annotate_kernel
            && (module.starts_with('[') || module.ends_with("vmlinux"))
            && !module.contains("unknown")
        {
            f.push_str("_[k]");
        } else if o.annotate_jit && p.jit_dso.is_match(module) && !f.contains("_[j]") {
            f.push_str("_[j]");
        }
        names.push(f);
    }
    names.join(";")
}

/// Interned strings: frame names and roots, by id.
#[derive(Default)]
struct Names {
    ids: FxHashMap<String, u32>,
    text: Vec<String>,
}

impl Names {
    fn id(&mut self, s: String) -> u32 {
        if let Some(&i) = self.ids.get(&s) {
            return i;
        }
        let i = self.text.len() as u32;
        self.text.push(s.clone());
        self.ids.insert(s, i);
        i
    }
}

const EMPTY: u32 = u32::MAX;

struct Folder<'a> {
    o: Options,
    p: Patterns,
    names: Names,
    caches: [FxHashMap<&'a [u8], u32>; 2], // raw frame line -> names id (EMPTY: none), per Java-ness
    out: FxHashMap<Vec<u32>, u128>,         // root id then frame ids, root first
    event_filter: Option<String>,
}

impl<'a> Folder<'a> {
    /// The header branch: Some(None) for a header filtered out, Some(Some((period, root id,
    /// java))) for a header, None for a line that is not one.
    fn header(&mut self, line: &str) -> PyResult<Option<Option<(u128, u32, bool)>>> {
        let Some((comm_end, (d1, d1_end), tid)) = header_match(line) else { return Ok(None) };
        let mut weight: Option<&str> = None;
        if let Some((period, (e0, e1))) = period_event_match(line) {
            weight = period.map(|(a, b)| &line[a..b]);
            let event = &line[e0..e1];
            match &self.event_filter {
                None => self.event_filter = Some(event.to_string()),
                Some(f) if f != event => return Ok(Some(None)),
                Some(_) => {}
            }
        }
        let period = if self.o.counts || perl_false(weight) {
            1
        } else {
            weight.unwrap_or("1").parse::<u128>().map_err(|_| PyOverflowError::new_err("period beyond 128 bits"))?
        };
        let r = root(&line[..comm_end], &line[d1..d1_end], tid.map(|(a, b)| &line[a..b]), &self.o);
        let java = r.starts_with("java");
        Ok(Some(Some((period, self.names.id(r), java))))
    }

    fn fold(&mut self, data: &'a [u8]) -> PyResult<()> {
        let mut parts: Vec<u32> = Vec::new(); // frame ids, leaf first
        let mut key: Vec<u32> = Vec::new();
        let mut pname: Option<u32> = None;
        let mut java = false;
        let mut period: u128 = 1;
        let mut pos = 0;
        while pos < data.len() {
            let end = memchr(b'\n', &data[pos..]).map_or(data.len(), |i| pos + i + 1);
            let raw = &data[pos..end];
            pos = end;
            if let Some(&id) = self.caches[java as usize].get(raw) {
                if pname.is_some() && id != EMPTY {
                    parts.push(id);
                }
                continue;
            }
            let bytes = raw.strip_suffix(b"\n").unwrap_or(raw);
            // valid UTF-8 (fold_all checks each piece first), cut at "\n"
            let line = unsafe { std::str::from_utf8_unchecked(bytes) };
            if line.starts_with('#') {
                continue;
            }
            if line.is_empty() {
                let Some(root) = pname else { continue };
                key.clear();
                key.push(root);
                key.extend(parts.iter().rev());
                let total = match self.out.get_mut(key.as_slice()) {
                    Some(v) => v,
                    None => self.out.entry(key.clone()).or_insert(0),
                };
                *total = total.checked_add(period).ok_or_else(|| PyOverflowError::new_err("count beyond 128 bits"))?;
                parts.clear();
                pname = None;
                continue;
            }
            match self.header(line)? {
                Some(Some((p, root, j))) => {
                    period = p;
                    pname = Some(root);
                    java = j;
                    continue;
                }
                Some(None) => continue,
                None => {}
            }
            if pname.is_none() {
                continue;
            }
            let names = frame_names(line, java, &self.o, &self.p);
            let id = if names.is_empty() { EMPTY } else { self.names.id(names) };
            self.caches[java as usize].insert(raw, id);
            if id != EMPTY {
                parts.push(id);
            }
        }
        Ok(())
    }

    fn new(o: Options, event_filter: Option<String>) -> Self {
        Folder { o, p: Patterns::new(), names: Names::default(), caches: [FxHashMap::default(), FxHashMap::default()],
                 out: FxHashMap::default(), event_filter }
    }

    /// The stacks as text, with their counts.
    fn stacks(self) -> Vec<(String, u128)> {
        let text = &self.names.text;
        self.out.into_iter().map(|(key, count)| {
            let parts: Vec<&str> = key.iter().map(|id| text[*id as usize].as_str()).collect();
            (parts.join(";"), count)
        }).collect()
    }
}

/// The event of the first header that names one: the filter the line loop would settle on
/// (a header is never a cached frame line, so every header is seen where it stands).
fn first_event(data: &[u8]) -> Option<String> {
    for raw in data.split(|&b| b == b'\n') {
        if raw.is_empty() || raw[0] == b'#' {
            continue;
        }
        let line = std::str::from_utf8(raw).ok()?;
        if header_match(line).is_some() {
            if let Some((_, (a, b))) = period_event_match(line) {
                return Some(line[a..b].to_string());
            }
        }
    }
    None
}

/// The input cut into about n pieces, each after an empty line: there the loop's state is the
/// same whatever came before (no process name, no frames), all but the event filter.
fn pieces(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for k in 1..n {
        let target = data.len() / n * k;
        if target <= start {
            continue;
        }
        match memchr::memmem::find(&data[target..], b"\n\n") {
            Some(i) => {
                out.push(&data[start..target + i + 2]);
                start = target + i + 2;
            }
            None => break,
        }
    }
    out.push(&data[start..]);
    out
}

/// Each piece (of min_piece bytes at least) folded on its own thread (checked as UTF-8 there),
/// the stacks added up by text.
fn fold_all(data: &[u8], o: Options, event_filter: Option<String>, threads: usize, min_piece: usize)
            -> Result<Vec<(String, u128)>, PyErr> {
    let n = threads.min(data.len() / min_piece.max(1)).max(1);
    let event_filter = if n > 1 && event_filter.is_none() { first_event(data) } else { event_filter };
    let results: Vec<Result<Vec<(String, u128)>, PyErr>> = std::thread::scope(|scope| {
        let handles: Vec<_> = pieces(data, n).into_iter().map(|piece| {
            let filter = event_filter.clone();
            scope.spawn(move || {
                if std::str::from_utf8(piece).is_err() {
                    return Err(PyUnicodeDecodeError::new_err("not UTF-8")); // replaced below
                }
                let mut f = Folder::new(o, filter);
                f.fold(piece)?;
                Ok(f.stacks())
            })
        }).collect();
        handles.into_iter().map(|h| h.join().expect("a folding thread panicked")).collect()
    });
    if results.len() == 1 {
        return results.into_iter().next().expect("one result");
    }
    let mut total: FxHashMap<String, u128> = FxHashMap::default();
    for r in results {
        for (stack, count) in r? {
            let t = total.entry(stack).or_insert(0);
            *t = t.checked_add(count).ok_or_else(|| PyOverflowError::new_err("count beyond 128 bits"))?;
        }
    }
    Ok(total.into_iter().collect())
}

/// fold_perf(data, include_pid=False, include_tid=False, annotate_kernel=False,
/// annotate_jit=False, addrs=False, counts=False, event_filter=None, threads=0, min_piece=4 MiB)
/// -> {stack: count}. threads: 0 for one per core; no piece smaller than min_piece bytes (below a
/// few MB one thread is as fast).
#[pyfunction]
#[pyo3(signature = (data, *, include_pid=false, include_tid=false, annotate_kernel=false,
                    annotate_jit=false, addrs=false, counts=false, event_filter=None, threads=0,
                    min_piece=4 << 20))]
#[allow(clippy::too_many_arguments)]
fn fold_perf<'py>(py: Python<'py>, data: &[u8], include_pid: bool, include_tid: bool, annotate_kernel: bool,
                  annotate_jit: bool, addrs: bool, counts: bool, event_filter: Option<String>, threads: usize,
                  min_piece: usize) -> PyResult<Bound<'py, PyDict>> {
    let o = Options { include_pid, include_tid, annotate_kernel, annotate_jit, addrs, counts };
    let threads = if threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { threads };
    let folded = py.allow_threads(|| fold_all(data, o, event_filter, threads, min_piece));
    if folded.is_err() {
        if let Err(e) = std::str::from_utf8(data) {
            return Err(PyUnicodeDecodeError::new_utf8(py, data, e)?.into());
        }
    }
    let dict = PyDict::new(py);
    for (stack, count) in folded? {
        dict.set_item(stack, count)?;
    }
    Ok(dict)
}

#[pymodule]
fn lockdown_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fold_perf, m)?)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random lines over an alphabet of the characters the patterns care about.
    fn lines(n: usize) -> Vec<String> {
        let alphabet = [" ", "\t", "\r", "\x0B", "a", "é", "0", "1", "7", "/", ":", ".", "j", "-"];
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        (0..n)
            .map(|_| {
                let len = (next() % 16) as usize;
                (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect()
            })
            .collect()
    }

    #[test]
    fn header_as_regex() {
        let re = Regex::new(HEADER).unwrap();
        let mut matched = 0;
        for line in lines(400_000).iter().chain(["php-fpm8.2 14316/14316 1.2: 10 cpu-clock: ".to_string(),
                                                  "a 1234/1234 5.6: 7 e:".to_string()].iter()) {
            let ours = header_match(line).map(|(c, (a, b), t)| (&line[..c], &line[a..b], t.map(|(x, y)| &line[x..y])));
            let theirs = re.captures(line).map(|c| (c.get(1).unwrap().as_str(), c.get(2).unwrap().as_str(),
                                                    c.get(3).map(|m| m.as_str())));
            assert_eq!(ours, theirs, "{line:?}");
            matched += ours.is_some() as usize;
        }
        assert!(matched > 1000, "{matched}");
    }

    #[test]
    fn period_event_as_regex() {
        let re = Regex::new(PERIOD_EVENT).unwrap();
        let mut matched = 0;
        for line in lines(400_000).iter().chain(["php 1/1 1.2: 10 cpu-clock: ".to_string()].iter()) {
            let ours = period_event_match(line).map(|(p, (a, b))| (p.map(|(x, y)| &line[x..y]), &line[a..b]));
            let theirs = re.captures(line).map(|c| (c.get(1).map(|m| m.as_str()), c.get(2).unwrap().as_str()));
            assert_eq!(ours, theirs, "{line:?}");
            matched += ours.is_some() as usize;
        }
        assert!(matched > 1000, "{matched}");
    }
}
