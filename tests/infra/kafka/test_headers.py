from cadenza.infra.kafka.headers import get_header, headers_as_dict, set_header


def test_get_header_returns_the_last_value_of_a_repeated_key() -> None:
    headers = [("a", b"1"), ("b", b"2"), ("a", b"3")]
    assert get_header(headers, "a") == b"3"
    assert get_header(headers, "b") == b"2"
    assert get_header(headers, "c") is None
    assert get_header(None, "a") is None
    assert get_header([("n", None)], "n") is None


def test_set_header_replaces_all_earlier_values_and_keeps_the_rest() -> None:
    headers = [("a", b"1"), ("b", b"2"), ("a", b"3")]
    assert set_header(headers, "a", b"9") == [("b", b"2"), ("a", b"9")]
    assert set_header(None, "x", b"") == [("x", b"")]
    assert headers == [("a", b"1"), ("b", b"2"), ("a", b"3")]  # the input is not mutated


def test_headers_as_dict() -> None:
    assert headers_as_dict([("a", b"1"), ("a", b"2"), ("n", None)]) == {"a": b"2", "n": None}
    assert headers_as_dict(None) == {}
