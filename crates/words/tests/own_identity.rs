//! The identity an effect records for its own process, read the cheap way on the main thread
//! and the /proc way on any other, must be what `process_alive` later compares it against:
//! the start time and the name `/proc/self/stat` shows, whatever the process renamed itself to.
use exactly_words::sender::{process_alive, Identity};

/// The name `/proc/self/stat` shows for this process now.
fn proc_comm() -> String {
    let s = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    let (open, close) = (s.find('(').expect("'('"), s.rfind(')').expect("')'"));
    s[open + 1..close].to_string()
}

fn rename_this_thread(name: &str) {
    let c = std::ffi::CString::new(name).expect("a name without NUL");
    // SAFETY: PR_SET_NAME reads a NUL-terminated string, which `c` is.
    let rc = unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr()) };
    assert_eq!(rc, 0, "prctl(PR_SET_NAME)");
}

/// Whether the process `id` names is alive by the name and start time it recorded.
fn alive(id: &Identity, comm: Option<&str>) -> bool {
    process_alive(id.pid, id.start, comm)
}

fn main() {
    let first = Identity::this_process(None);
    assert_eq!(first.comm.as_deref(), Some(proc_comm().as_str()));
    assert!(first.start > 0, "a start time: {first:?}");
    assert!(alive(&first, first.comm.as_deref()));

    // Renamed after the first effect: the next one records the new name, or a live sender
    // would later be taken for gone.
    rename_this_thread("renamed-sender");
    let renamed = Identity::this_process(None);
    assert_eq!(renamed.comm.as_deref(), Some("renamed-sender"));
    assert_eq!(renamed.start, first.start);
    assert!(alive(&renamed, renamed.comm.as_deref()));
    assert!(!alive(&renamed, first.comm.as_deref()));

    // Another thread's own name is not the process's: /proc shows the main thread's.
    let from_thread = std::thread::spawn(|| {
        rename_this_thread("worker-thread");
        Identity::this_process(None)
    })
    .join()
    .expect("the thread");
    assert_eq!(from_thread.comm.as_deref(), Some("renamed-sender"));
    assert_eq!(from_thread.start, first.start);
    assert!(alive(&from_thread, from_thread.comm.as_deref()));
    println!("own_identity: 3 identities, each the one /proc shows");
}
