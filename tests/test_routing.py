"""Topic and headers matching as pure functions."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from amqp_server.broker.exchange import headers_match
from amqp_server.broker.topic import TopicTrie, topic_matches
from amqp_server.wire.table import FieldTable

words = st.sampled_from(["a", "b", "c", "stock", ""])
pattern_words = st.sampled_from(["a", "b", "c", "stock", "*", "#", ""])
routing_keys = st.lists(words, min_size=1, max_size=6).map(".".join)
binding_keys = st.lists(pattern_words, min_size=1, max_size=6).map(".".join)


@settings(max_examples=500)
@given(st.lists(binding_keys, max_size=8), routing_keys)
def test_trie_agrees_with_reference_matcher(bindings, key):
    trie = TopicTrie()
    for index, binding in enumerate(bindings):
        trie.add(binding, index)
    expected = {i for i, b in enumerate(bindings) if topic_matches(b, key)}
    assert trie.match(key) == expected


@settings(max_examples=200)
@given(st.lists(binding_keys, min_size=1, max_size=8), routing_keys)
def test_trie_removal_restores_previous_matches(bindings, key):
    trie = TopicTrie()
    for index, binding in enumerate(bindings):
        trie.add(binding, index)
    trie.remove(bindings[0], 0)
    expected = {i for i, b in enumerate(bindings) if i and topic_matches(b, key)}
    assert trie.match(key) == expected


def test_topic_examples_from_rabbitmq_tutorial():
    assert topic_matches("*.orange.*", "quick.orange.rabbit")
    assert topic_matches("lazy.#", "lazy")
    assert topic_matches("#", "")
    assert not topic_matches("*.orange.*", "quick.orange.male.rabbit")
    assert topic_matches("a.#.b", "a.b")
    assert topic_matches("a.#.b", "a.x.y.b")


def test_many_hash_patterns_stay_fast():
    trie = TopicTrie()
    trie.add("#.#.#.#.#.#.#.#.#.#.#.x", "q")
    assert trie.match(".".join(["w"] * 60)) == frozenset()


def table(**items):
    result = FieldTable()
    for key, value in items.items():
        result[key.replace("_", "-")] = value
    return result


def test_headers_all_and_any():
    binding = table(x_match="all", a=1, b="x")
    assert headers_match(binding, {"a": 1, "b": "x", "c": 0})
    assert not headers_match(binding, {"a": 1})
    binding = table(x_match="any", a=1, b="x")
    assert headers_match(binding, {"b": "x"})
    assert not headers_match(binding, {})


def test_headers_void_matches_presence_and_x_keys_are_skipped():
    binding = table(x_match="all", a=None)
    binding.types["a"] = "void"
    assert headers_match(binding, {"a": "anything"})
    assert not headers_match(binding, {})
    assert headers_match(table(x_match="all", x_k="v"), {})
    assert not headers_match(table(x_match="any", x_k="v"), {"x-k": "v"})
    assert headers_match(table(x_match="any-with-x", x_k="v"), {"x-k": "v"})
