//! Kafka's text form of a UUID (topic ids, cluster ids, directory ids): URL-safe base64 of its 16
//! bytes without padding, 22 characters, as `kafka-topics.sh` prints and `kafka-storage.sh`
//! generates them.

use uuid::Uuid;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// `id` as Kafka prints it.
pub fn to_kafka_string(id: Uuid) -> String {
    let mut out = String::with_capacity(22);
    let (mut acc, mut bits) = (0u32, 0);
    for byte in id.into_bytes() {
        acc = (acc << 8) | u32::from(byte);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(char::from(ALPHABET[((acc >> bits) & 63) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((acc << (6 - bits)) & 63) as usize]));
    }
    out
}

/// Parses [`to_kafka_string`]'s form back; `None` unless `text` is 22 characters of URL-safe
/// base64.
pub fn parse_kafka_string(text: &str) -> Option<Uuid> {
    if text.len() != 22 {
        return None;
    }
    let mut bytes = Vec::with_capacity(17);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((acc >> bits) as u8);
        }
    }
    Uuid::from_slice(&bytes[..16]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_ids_print_as_kafka_prints_them() {
        // Kafka's METADATA_TOPIC_ID (0, 1), and a random id checked with Python's base64.
        assert_eq!(to_kafka_string(Uuid::from_u64_pair(0, 1)), "AAAAAAAAAAAAAAAAAAAAAQ");
        let id = Uuid::parse_str("f47ac10b-58cc-4372-a567-0e02b2c3d479").ok();
        assert_eq!(id.map(to_kafka_string).as_deref(), Some("9HrBC1jMQ3KlZw4CssPUeQ"));
        assert_eq!(to_kafka_string(Uuid::from_bytes([0; 16])), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(to_kafka_string(Uuid::from_bytes([0xff; 16])), "_____________________w");
        let id = Uuid::from_bytes([
            0xfb, 0xef, 0xbe, 0x00, 0x10, 0x83, 0x10, 0x51, 0x87, 0x20, 0x92, 0x8b, 0x30, 0xd3, 0x8f, 0x41,
        ]);
        assert_eq!(to_kafka_string(id), "----ABCDEFGHIJKLMNOPQQ");
    }

    #[test]
    fn the_text_form_round_trips() {
        for _ in 0..100 {
            let id = Uuid::new_v4();
            assert_eq!(parse_kafka_string(&to_kafka_string(id)), Some(id));
        }
        assert_eq!(parse_kafka_string("short"), None);
        assert_eq!(parse_kafka_string("AAAAAAAAAAAAAAAAAAAAA="), None);
    }
}
