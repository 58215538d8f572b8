//! The controller's connections: the accept loop (which also runs the timers), the TLS
//! handshake, and serving one connection's lines.

use super::leader::{campaign, lease_loop};
use super::*;
use crate::tls::ChannelReader;

/// Campaigns until it leads, takes over, starts the lease thread, then accepts connections
/// (each served on a thread of its own) and runs the timers, until stopped or deposed.
pub(super) fn accept_loop(
    listener: TcpListener,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    ha: HaOptions,
) {
    let tls = state.lock().expect("controller state").tls.clone();
    let Some(leadership) = campaign(&listener, &stop, &ha, &tls) else {
        return;
    };
    {
        let mut st = state.lock().expect("controller state");
        if let Err(why) = st.lead(ha.store.clone(), leadership.clone()) {
            return st.depose(format!("cannot take over: {why}"));
        }
        let (state2, stop2, store) = (state.clone(), stop.clone(), ha.store.clone());
        match std::thread::Builder::new()
            .name("onepipe-controller-lease".into())
            .spawn(move || lease_loop(store, leadership, state2, stop2))
        {
            Ok(h) => st.handlers.push(h),
            Err(e) => return st.depose(format!("cannot start the lease thread: {e}")),
        }
    }
    while !stop.load(Ordering::SeqCst) {
        // The failure procedure's timer: Determine once every report has had time to arrive.
        {
            let mut st = state.lock().expect("controller state");
            if st.deposed.is_some() {
                return;
            }
            st.on_tick();
        }
        match listener.accept() {
            Ok((stream, peer)) => {
                let mut st = state.lock().expect("controller state");
                st.handlers.retain(|h| !h.is_finished());
                // Connections open or still in their handshake.
                if st.handlers.len() >= CONNECTIONS_MAX {
                    st.malformed += 1;
                    continue;
                }
                let id = st.next_conn;
                st.next_conn += 1;
                let (state2, stop2, tls) = (state.clone(), stop.clone(), st.tls.clone());
                // The TLS handshake happens on the connection's own thread: a slow or silent
                // client never holds up the accept loop.
                let spawned = std::thread::Builder::new()
                    .name("onepipe-controller-conn".into())
                    .spawn(move || serve(stream, peer, tls, id, state2, stop2));
                if let Ok(h) = spawned {
                    st.handlers.push(h);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(POLL_INTERVAL / 5)
            }
            Err(_) => std::thread::sleep(POLL_INTERVAL / 5),
        }
    }
}

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A new connection as a [`Channel`]: the TLS handshake when the cluster has TLS.
pub(super) fn open_channel(
    stream: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> io::Result<Channel> {
    match tls {
        Some(cfg) => Channel::server(stream, cfg, HANDSHAKE_TIMEOUT),
        None => Ok(Channel::plain(stream)),
    }
}

/// Serves one connection until it closes or the controller stops: the TLS handshake first
/// (a client that fails it is counted and dropped), then one line at a time.
fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    id: u64,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
) {
    let Some(reader) = register(stream, peer, tls, id, &state) else {
        return;
    };
    let closed_cleanly = read_lines(reader, id, &state, &stop);
    let mut st = state.lock().expect("controller state");
    st.on_closed(id, closed_cleanly);
}

/// Opens connection `id` (the TLS handshake) and registers it with the controller: its
/// reader, or `None` when the handshake failed (counted), the channel cannot be split or the
/// controller was deposed.
fn register(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    id: u64,
    state: &Mutex<State>,
) -> Option<ChannelReader> {
    let _ = stream.set_nonblocking(false);
    let tls_on = tls.is_some();
    let channel = match open_channel(stream, tls) {
        Ok(c) => c,
        Err(e) => {
            let mut st = state.lock().expect("controller state");
            st.malformed += 1;
            st.tls_refused += 1;
            debug!(%peer, "refused a connection: {e}");
            return None;
        }
    };
    let (Ok(writer), Ok(reader)) = (channel.writer(), channel.reader()) else {
        return None;
    };
    let _ = writer.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = reader.set_read_timeout(Some(POLL_INTERVAL));
    let mut st = state.lock().expect("controller state");
    if st.deposed.is_some() {
        return None;
    }
    st.conns.insert(
        id,
        Conn {
            writer,
            identity: tls_on.then_some(channel),
            peer,
            member: None,
        },
    );
    Some(reader)
}

/// Reads connection `id` one line at a time, each to the controller, until it closes or the
/// controller stops. Returns whether it closed cleanly (the controller stopping).
fn read_lines(reader: ChannelReader, id: u64, state: &Mutex<State>, stop: &AtomicBool) -> bool {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            break true;
        }
        match read_line(&mut reader, &mut buf) {
            Ok(false) => break false,
            Ok(true) => {
                // A read timeout may have split a line: keep the start until its newline.
                pending.extend_from_slice(&buf);
                if pending.last() != Some(&b'\n') {
                    continue;
                }
                let line = std::mem::take(&mut pending);
                let mut st = state.lock().expect("controller state");
                match parse_line::<ToController>(&line) {
                    Ok(msg) => st.on_message(id, msg),
                    Err(e) => {
                        st.malformed += 1;
                        st.reply(
                            id,
                            &FromController::Error {
                                message: format!("not a control message: {e}"),
                            },
                        );
                    }
                }
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                pending.extend_from_slice(&buf);
                if pending.len() > crate::control::LINE_LEN_MAX {
                    state.lock().expect("controller state").malformed += 1;
                    break false;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                // A line too long: garbage, not a member.
                state.lock().expect("controller state").malformed += 1;
                break false;
            }
            // Reset or failed: the member is gone.
            Err(_) => break false,
        }
    }
}
