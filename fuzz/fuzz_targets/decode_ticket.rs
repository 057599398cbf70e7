//! `ticket::TicketBody::decode` and `from_name` on arbitrary bytes: never
//! a panic; a decoded body re-encodes to the same bytes, and its name
//! decodes to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sextant_types::ticket::{base64url, TicketBody};

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = TicketBody::decode(data) {
        assert_eq!(body.encode(), data);
        let (back, bytes) = TicketBody::from_name(&body.name()).expect("its own name");
        assert_eq!(back, body);
        assert_eq!(bytes, data);
    }
    let _ = TicketBody::from_name(&format!("t1.{}", String::from_utf8_lossy(data)));
    let _ = TicketBody::from_name(&format!("t1.{}", base64url(data)));
});
