//! The spawner's socket (`SOCK_SEQPACKET`): one whole message at a time each way, a descriptor
//! attached where one goes along (a run's output pipe, the watchdog's pipe; `SCM_RIGHTS`).
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// Largest message either way (a command's arguments and environment).
pub(super) const MAX_MESSAGE: usize = 256 * 1024;

/// A connected pair, both ends closed on `exec`.
pub(super) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: fds has room for two descriptors.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends one message, with `fd` attached when given.
pub(super) fn send_with_fd(sock: RawFd, msg: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    send_with_flags(sock, msg, fd, 0)
}

/// [`send_with_fd`] with `sendmsg` flags added (`MSG_DONTWAIT`).
pub(super) fn send_with_flags(
    sock: RawFd,
    msg: &[u8],
    fd: Option<RawFd>,
    flags: i32,
) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // Room for one descriptor's control message, aligned as cmsghdr needs.
    let mut control = [0u64; 4];
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE/CMSG_LEN are pure; control is large enough for one int.
        unsafe {
            hdr.msg_control = control.as_mut_ptr().cast();
            hdr.msg_controllen = libc::CMSG_SPACE(size_of::<RawFd>() as u32) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&hdr);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        }
    }
    loop {
        // SAFETY: hdr points at live buffers (see above).
        let n = unsafe { libc::sendmsg(sock, &hdr, libc::MSG_NOSIGNAL | flags) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one message into `buf`: its length (0 at end of file) and the descriptor attached.
pub(super) fn recv_with_fd(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: as in send_with_fd.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = size_of_val(&control) as _;
    let n = loop {
        // SAFETY: hdr points at live buffers.
        let n = unsafe { libc::recvmsg(sock, &mut hdr, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut fd = None;
    // SAFETY: the kernel filled hdr's control buffer; we walk it with the CMSG macros.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
            cmsg = libc::CMSG_NXTHDR(&hdr, cmsg);
        }
    }
    Ok((n, fd))
}
