use super::*;

#[test]
fn writes_with_fixture_separators_and_escapes() {
    let doc = obj([
        ("a", arr([Doc::Int(1), Doc::Null])),
        ("b", s("q\"\\\n\t\u{1}é")),
        ("c", Doc::Raw("{\"x\":true}".to_owned())),
        ("d", obj([])),
    ]);
    let text = doc.to_text();
    assert_eq!(
        text,
        r#"{"a": [1, null], "b": "q\"\\\n\t\u0001é", "c": {"x":true}, "d": {}}"#
    );
    let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed["b"], "q\"\\\n\t\u{1}é");
}

#[test]
fn minify_keeps_strings_and_key_order() {
    let pretty = "{\n \"z\" : [1, 2],\n \"a\": \"x y \\\" } z\\\\\",\n \"m\": {}\n}";
    assert_eq!(minify(pretty), r#"{"z":[1,2],"a":"x y \" } z\\","m":{}}"#);
}
