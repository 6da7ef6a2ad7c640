//! A run's output: stdout and stderr as they arrive, bounded, stored so far for
//! `exactly logs --follow`.
use crate::jobs;
use crate::Store;
use std::collections::VecDeque;
use std::io::Read;
use std::sync::Mutex;
use std::time::Duration;

/// Bytes of a run's output kept from its start, and from its end.
const LOG_HEAD: usize = 16 * 1024;
const LOG_TAIL: usize = 48 * 1024;
/// The command's stdout and stderr, interleaved as they arrive, bounded: the head and the
/// tail are kept, the middle counted.
#[derive(Default)]
pub(crate) struct LogBuf {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
    /// Bytes received in all (so a flush can tell whether anything is new).
    seen: u64,
}

/// How often a running command's output so far is stored for `exactly logs --follow`.
pub(crate) const OUTPUT_FLUSH: Duration = Duration::from_secs(1);

/// Stores the output so far when it grew since `flushed` bytes.
pub(crate) fn flush_output(
    store: &mut Store,
    run_id: &str,
    log: &Mutex<LogBuf>,
    flushed: &mut u64,
) {
    let Some((seen, text)) = log
        .lock()
        .ok()
        .filter(|l| l.seen != *flushed)
        .map(|l| (l.seen, l.render()))
    else {
        return;
    };
    // Best effort: a busy database delays the follower, never the run.
    if jobs::run_output_so_far(store, run_id, &text).is_ok() {
        *flushed = seen;
    }
}

impl LogBuf {
    /// Bytes received in all.
    pub(crate) fn seen(&self) -> u64 {
        self.seen
    }
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.seen += bytes.len() as u64;
        let room = LOG_HEAD.saturating_sub(self.head.len());
        let (h, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(h);
        for &b in rest {
            if self.tail.len() == LOG_TAIL {
                self.tail.pop_front();
                self.dropped += 1;
            }
            self.tail.push_back(b);
        }
    }
    pub(crate) fn render(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            out.push_str(&format!("\n[… {} bytes not kept …]\n", self.dropped));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

/// A command's output, read by its run's own thread between its other duties (no thread of
/// its own per run): non-blocking, waited for with `poll`.
pub(crate) struct OutputPipe {
    file: Option<std::fs::File>,
}

impl OutputPipe {
    pub(crate) fn new(file: Option<std::fs::File>) -> OutputPipe {
        if let Some(f) = &file {
            use std::os::fd::AsRawFd;
            // SAFETY: fcntl on a descriptor we own.
            unsafe {
                let fd = f.as_raw_fd();
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
        OutputPipe { file }
    }

    /// Whether the writing ends are all closed (or there was no output to read).
    pub(crate) fn ended(&self) -> bool {
        self.file.is_none()
    }

    /// Waits up to `wait` for output and takes in all there is; false once none can come.
    pub(crate) fn read(&mut self, log: &Mutex<LogBuf>, wait: Duration) -> bool {
        use std::os::fd::AsRawFd;
        let Some(f) = self.file.as_mut() else {
            return false;
        };
        let mut pfd = libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, ms) } <= 0 {
            return true;
        }
        let mut buf = [0u8; 8192];
        loop {
            match f.read(&mut buf) {
                Ok(0) => {
                    self.file = None;
                    return false;
                }
                Ok(n) => {
                    if let Ok(mut l) = log.lock() {
                        l.push(&buf[..n]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.file = None;
                    return false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keeps_head_and_tail() {
        let mut l = LogBuf::default();
        l.push(&vec![b'a'; LOG_HEAD]);
        l.push(&vec![b'b'; LOG_TAIL + 10]);
        l.push(b"end");
        let r = l.render();
        assert!(r.starts_with("aaa"));
        assert!(r.ends_with("bend"));
        assert!(r.contains("13 bytes not kept"));
    }
}
