"""Topic routing: a trie of binding-key words with `*` and `#` wildcards.

`*` matches exactly one word and `#` zero or more, words being separated by
dots, as in RabbitMQ's rabbit_db_topic_exchange.  Matches are cached per
routing key because real traffic repeats a small set of keys; any binding
change clears the cache.
"""

from __future__ import annotations

_CACHE_LIMIT = 4096


def words(key: str) -> list[str]:
    """rabbit_db_topic_exchange:split_topic_key: the empty key has no words
    (so `*` does not match it); "a." is ["a", ""]."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "destinations")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        # destination -> number of bindings with this exact key ending here
        self.destinations: dict[object, int] = {}


class TopicTrie:
    def __init__(self) -> None:
        self._root = _Node()
        self._cache: dict[str, frozenset] = {}

    def add(self, binding_key: str, destination: object) -> None:
        node = self._root
        for word in words(binding_key):
            node = node.children.setdefault(word, _Node())
        node.destinations[destination] = node.destinations.get(destination, 0) + 1
        self._cache.clear()

    def remove(self, binding_key: str, destination: object) -> None:
        path = [self._root]
        key_words = words(binding_key)
        for word in key_words:
            child = path[-1].children.get(word)
            if child is None:
                return
            path.append(child)
        leaf = path[-1]
        count = leaf.destinations.get(destination, 0)
        if count <= 1:
            leaf.destinations.pop(destination, None)
        else:
            leaf.destinations[destination] = count - 1
        # Prune empty branches so the trie does not grow with churn.
        for depth in range(len(key_words), 0, -1):
            node = path[depth]
            if node.children or node.destinations:
                break
            del path[depth - 1].children[key_words[depth - 1]]
        self._cache.clear()

    def match(self, routing_key: str) -> frozenset:
        cached = self._cache.get(routing_key)
        if cached is not None:
            return cached
        found: set = set()
        self._match(self._root, words(routing_key), 0, found, set())
        result = frozenset(found)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[routing_key] = result
        return result

    def _match(self, node: _Node, key_words: list[str], index: int, found: set,
               seen: set) -> None:
        # Each (node, position) is visited once, which keeps keys like
        # "#.*.#.*.#" polynomial instead of exponential in the key length.
        state = (id(node), index)
        if state in seen:
            return
        seen.add(state)
        children = node.children
        hash_node = children.get("#")
        if hash_node is not None:
            # '#' swallows zero or more words: try every remaining suffix.
            for rest in range(index, len(key_words) + 1):
                self._match(hash_node, key_words, rest, found, seen)
        if index == len(key_words):
            found.update(node.destinations)
            return
        word = key_words[index]
        exact = children.get(word)
        if exact is not None:
            self._match(exact, key_words, index + 1, found, seen)
        star = children.get("*")
        if star is not None:
            self._match(star, key_words, index + 1, found, seen)


def topic_matches(binding_key: str, routing_key: str) -> bool:
    """Reference matcher on one pair; the property tests compare the trie to it."""
    def walk(pattern: list[str], words: list[str]) -> bool:
        if not pattern:
            return not words
        head, rest = pattern[0], pattern[1:]
        if head == "#":
            return any(walk(rest, words[i:]) for i in range(len(words) + 1))
        if not words:
            return False
        if head == "*" or head == words[0]:
            return walk(rest, words[1:])
        return False

    return walk(words(binding_key), words(routing_key))
