use super::*;
use crate::control::{read_line, write_line, FromController};
use std::io::BufReader;
use std::net::TcpListener;

const PATIENCE: Duration = Duration::from_secs(10);

/// A server channel and a client channel on loopback, with these credentials.
fn pair(server: &Credentials, client: &Credentials) -> (io::Result<Channel>, io::Result<Channel>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = server.server_config().unwrap();
    let s = std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        Channel::server(tcp, cfg, PATIENCE)
    });
    let c = Channel::client(
        TcpStream::connect(addr).unwrap(),
        client.client_config().unwrap(),
        PATIENCE,
    );
    (s.join().unwrap(), c)
}

#[test]
fn a_member_and_the_controller_authenticate_each_other_and_talk_both_ways_at_once() {
    let pki = Pki::generate().unwrap();
    let (s, c) = pair(
        &pki.issue(&[CONTROLLER]).unwrap(),
        &pki.issue(&["tor-0"]).unwrap(),
    );
    let (s, c) = (s.unwrap(), c.unwrap());
    assert!(s.peer_may_act_as("tor-0"));
    assert!(!s.peer_may_act_as("tor-1"));
    assert!(!s.peer_may_act_as(CONTROLLER));
    assert!(!s.peer_may_act_as("not a name"));
    // Both sides write many lines while the other reads on another thread.
    let n = 2_000;
    let writer = |ch: &Channel, tag: &'static str| {
        let mut w = ch.writer().unwrap();
        std::thread::spawn(move || {
            for i in 0..n {
                let msg = FromController::Error {
                    message: format!("{tag} {i} {}", "x".repeat(i % 300)),
                };
                write_line(&mut w, &msg).unwrap();
            }
        })
    };
    let reader = |ch: &Channel, tag: &'static str| {
        let r = ch.reader().unwrap();
        r.set_read_timeout(Some(PATIENCE)).unwrap();
        std::thread::spawn(move || {
            let mut r = BufReader::new(r);
            let mut buf = Vec::new();
            for i in 0..n {
                assert!(read_line(&mut r, &mut buf).unwrap());
                let m: FromController = crate::control::parse_line(&buf).unwrap();
                let FromController::Error { message } = m else {
                    panic!("{m:?}")
                };
                assert!(message.starts_with(&format!("{tag} {i} ")), "{message}");
            }
        })
    };
    let threads = [
        writer(&s, "from s"),
        writer(&c, "from c"),
        reader(&c, "from s"),
        reader(&s, "from c"),
    ];
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_certificate_of_another_ca_is_refused_both_ways() {
    let ours = Pki::generate().unwrap();
    let theirs = Pki::generate().unwrap();
    // A stranger's client certificate.
    let (s, _) = pair(
        &ours.issue(&[CONTROLLER]).unwrap(),
        &theirs.issue(&["tor-0"]).unwrap(),
    );
    assert!(s.is_err());
    // A stranger posing as the controller.
    let (_, c) = pair(
        &theirs.issue(&[CONTROLLER]).unwrap(),
        &ours.issue(&["tor-0"]).unwrap(),
    );
    assert!(c.is_err());
    // One of ours whose certificate does not say "controller".
    let (_, c) = pair(
        &ours.issue(&["tor-0"]).unwrap(),
        &ours.issue(&["tor-1"]).unwrap(),
    );
    assert!(c.is_err());
}

#[test]
fn a_plain_client_is_told_that_tls_is_required() {
    let pki = Pki::generate().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cfg = pki.issue(&[CONTROLLER]).unwrap().server_config().unwrap();
    let s = std::thread::spawn(move || {
        let (tcp, _) = listener.accept().unwrap();
        Channel::server(tcp, cfg, PATIENCE)
    });
    let mut tcp = TcpStream::connect(addr).unwrap();
    write_line(&mut tcp, &crate::control::ToController::Status).unwrap();
    tcp.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut r = BufReader::new(tcp);
    let mut buf = Vec::new();
    assert!(read_line(&mut r, &mut buf).unwrap());
    let reply: FromController = crate::control::parse_line(&buf).unwrap();
    assert!(
        matches!(&reply, FromController::Error { message } if message.contains("requires TLS"))
    );
    assert_eq!(
        s.join().unwrap().unwrap_err().kind(),
        io::ErrorKind::PermissionDenied
    );
}

#[test]
fn credentials_round_trip_through_files() {
    let pki = Pki::generate().unwrap();
    let dir = std::env::temp_dir().join(format!("onepipe-tls-{}", std::process::id()));
    pki.write_dir(&dir, &["tor-0".into(), CONTROLLER.into()])
        .unwrap();
    let c = Credentials::load(&dir, "tor-0").unwrap();
    let ctl = Credentials::load(&dir, CONTROLLER).unwrap();
    let (s, cl) = pair(&ctl, &c);
    assert!(s.unwrap().peer_may_act_as("tor-0") && cl.is_ok());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("tor-0.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "keys are private");
    let err = Credentials::load(&dir, "p9").unwrap_err();
    assert!(err.contains("p9.crt"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
