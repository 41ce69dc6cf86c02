//! The operating-system calls the broker makes through libc, each behind a safe function.
//! With the memory maps of `log/segment.rs`, this is the only unsafe code of the broker: the
//! workspace denies `unsafe_code` and these two modules allow it, so a new unsafe block
//! elsewhere fails the build rather than passing review unseen.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Sends up to `len` bytes of `file` from `offset` to `socket` (sendfile(2)): the socket
/// references the page-cache pages, nothing is copied through user space. The number sent;
/// `WouldBlock` from a non-blocking socket that is full; 0 when the file ends before `offset`.
pub fn sendfile(
    socket: BorrowedFd<'_>,
    file: &File,
    offset: u64,
    len: usize,
) -> std::io::Result<usize> {
    let mut off = libc::off_t::try_from(offset)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: both descriptors are open for the duration of the call (borrowed), and `off` is
    // a local the kernel writes the new offset into.
    match unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut off, len) } {
        n if n >= 0 => Ok(n as usize),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Sets a TCP socket's receive low-water mark (SO_RCVLOWAT): the kernel reports the socket
/// readable, and so wakes its reader, only once `bytes` are queued (or the stream ends);
/// a read still returns whatever is there. Lowering it wakes a reader whose bytes are already
/// queued. `socket` is a descriptor its caller keeps open for the call.
pub fn set_receive_low_water(socket: RawFd, bytes: usize) -> std::io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_RCVLOWAT, value)
}

/// setsockopt(2) of one `int` option.
fn set_int_option(
    socket: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    // SAFETY: setsockopt reads `value` (its size given); a descriptor that is not a socket is
    // an error return, not undefined behaviour.
    let r = unsafe {
        libc::setsockopt(
            socket,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Flushes every file of the file system holding `file` (syncfs(2)).
pub fn syncfs(file: &File) -> std::io::Result<()> {
    // SAFETY: the descriptor is open for the duration of the call.
    match unsafe { libc::syncfs(file.as_raw_fd()) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Sets or clears TCP_CORK on a TCP socket: while set, the kernel sends only full segments;
/// clearing it sends what it held back.
pub fn set_cork(socket: BorrowedFd<'_>, on: bool) -> std::io::Result<()> {
    set_int_option(
        socket.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_CORK,
        libc::c_int::from(on),
    )
}

/// (total, available to an unprivileged writer) bytes of the filesystem holding `dir`.
pub fn filesystem_bytes(dir: &Path) -> Option<(u64, u64)> {
    let path = CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` is written by statvfs before it is read (only
    // on success).
    if unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // fsblkcnt_t and c_ulong are u64 on the 64-bit Linux targets Strata builds for.
    let unit = st.f_frsize;
    Some((st.f_blocks * unit, st.f_bavail * unit))
}

/// The kernel's clock ticks per second (the unit of /proc's CPU times).
pub fn clock_ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&hz| hz > 0)
}

/// The size of a memory page in bytes (the unit of /proc's memory sizes).
pub fn page_size() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()
}

/// The process's open-file limit: (soft, hard).
pub fn open_file_limit() -> Option<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0)
        .then_some((lim.rlim_cur, lim.rlim_max))
}

/// Sets the process's soft open-file limit (at most the hard one, `hard`).
pub fn set_open_file_limit(soft: u64, hard: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the struct passed.
    match unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Lowers the calling thread's scheduling priority to `nice`; false when the kernel refuses.
pub fn set_thread_nice(nice: i32) -> bool {
    // SAFETY: plain syscalls on the calling thread's own id.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calls_answer_on_this_machine() {
        let dir = tempfile::tempdir().unwrap();
        let (total, available) = filesystem_bytes(dir.path()).unwrap();
        assert!(total > 0 && available <= total);
        assert!(filesystem_bytes(&dir.path().join("missing")).is_none());
        syncfs(&File::open(dir.path()).unwrap()).unwrap();
        assert!(clock_ticks_per_second().is_some_and(|hz| hz >= 100));
        assert!(page_size().is_some_and(|p| p >= 4096));
        let (soft, hard) = open_file_limit().unwrap();
        assert!(soft <= hard);
        set_open_file_limit(soft, hard).unwrap();
    }

    #[test]
    fn sendfile_sends_the_range_and_says_where_the_file_ends() {
        use std::io::{Read, Write};
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = File::open(&path).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert_eq!(sendfile(server.as_fd(), &file, 3, 4).unwrap(), 4);
        assert_eq!(sendfile(server.as_fd(), &file, 8, 100).unwrap(), 2);
        assert_eq!(sendfile(server.as_fd(), &file, 10, 5).unwrap(), 0);
        assert!(sendfile(server.as_fd(), &file, u64::MAX, 5).is_err());
        set_cork(server.as_fd(), true).unwrap();
        set_cork(server.as_fd(), false).unwrap();
        assert!(set_cork(file.as_fd(), true).is_err(), "not a socket");
        (&server).write_all(b"!").unwrap();
        let mut got = [0u8; 7];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"345689!");
    }
}
