//! The REST API's JSON request bodies, each decoded and converted as its route does; a
//! body that becomes a command encodes to a binary request the shard's decoder accepts.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&kind, body)) = data.split_first() else { return };
    rill_adapter_transport_http::bodies::check(kind, body);
});
