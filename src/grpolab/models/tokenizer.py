"""Character-level tokenizer for the tiny default model.

Every character of :data:`DEFAULT_ALPHABET` is one token, so a model of ~2 M parameters can learn
the built-in tasks (``grpolab.tasks``: "arith", "reverse") without first learning a subword
vocabulary. The tokenizer is a plain ``tokenizers.Tokenizer`` (WordLevel model, one-character
pre-tokenizer, ``Fuse`` decoder) wrapped in ``transformers.PreTrainedTokenizerFast``, so it saves
with ``save_pretrained`` and reloads with ``AutoTokenizer.from_pretrained`` like any HF tokenizer.

Layout of the vocabulary (ids are stable for a given alphabet)::

    0 <pad>   1 <bos>   2 <eos>   3 <unk>   4.. one id per alphabet character, in alphabet order

Behaviour worth knowing:

* ``encode(s, add_special_tokens=True)`` prepends ``<bos>`` (never appends ``<eos>``: prompts
  must stay open for the completion; the trainer appends EOS to demonstrations itself).
* ``decode(encode(s, add_special_tokens=False)) == s`` exactly for every string over the
  alphabet: spaces, newlines and repeated whitespace survive (no normaliser, no clean-up).
* Characters outside the alphabet become ``<unk>`` at the tokenizer level; grpolab's prompt
  encoder refuses such text instead (:func:`check_encodable`: a ValueError naming the characters
  and the fix), so a prompt never silently becomes ``<unk>alculate ...``.
  :data:`PRINTABLE_ALPHABET` (``build_tokenizer(PRINTABLE_ALPHABET)``, config
  ``model.tokenizer_alphabet=printable``) covers printable ASCII but ``<`` and ``>``.
* The alphabet deliberately contains no ``<`` or ``>``, so that no run of ordinary characters
  can spell a special token.
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerFast

__all__ = ["DEFAULT_ALPHABET", "PRINTABLE_ALPHABET", "SPECIAL_TOKENS", "build_tokenizer", "check_encodable"]

#: Special tokens, in id order: pad=0, bos=1, eos=2, unk=3.
SPECIAL_TOKENS: tuple[str, str, str, str] = ("<pad>", "<bos>", "<eos>", "<unk>")

#: Characters of the built-in tasks and of simple math answers (``\boxed{3/4}``, ``answer: -2.5``).
DEFAULT_ALPHABET: str = "0123456789abcdefghijklmnopqrstuvwxyz \n+-*/=;#()[]{},.:?!'\"_%^\\"

#: The default alphabet (same ids first) plus the rest of printable ASCII and tab, except ``<``
#: and ``>`` (they would let plain text spell the special tokens).
PRINTABLE_ALPHABET: str = DEFAULT_ALPHABET + "".join(
    c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ&$@|~`\t" if c not in DEFAULT_ALPHABET
)


def check_encodable(tokenizer, text: str, ids) -> None:
    """Raise ValueError if ``tokenizer`` turned characters of ``text`` into its unknown token.

    ``ids`` are the token ids ``tokenizer`` gave ``text``. Byte-level tokenizers (GPT-2, Qwen,
    Llama-3) never produce an unknown token, so this only ever fires for vocabularies with gaps,
    such as the tiny character-level tokenizer (:data:`DEFAULT_ALPHABET` has no capital letters).
    A text that spells the unknown token itself is left alone.
    """
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is None or unk not in list(ids):
        return
    unk_text = getattr(tokenizer, "unk_token", None)
    if unk_text and unk_text in text:
        return
    bad = sorted({c for c in text if unk in tokenizer(c, add_special_tokens=False)["input_ids"]})
    if not bad:
        return
    first = min(text.index(c) for c in bad)
    raise ValueError(
        f"the tokenizer cannot encode the characters {''.join(bad)!r} (first at position {first}: "
        f"{text[max(0, first - 10):first + 30]!r}); it would read them as {unk_text!r}. Use a model with "
        "its own tokenizer (model.path), build the tiny model with model.tokenizer_alphabet=printable, or "
        "lower-case the task's text"
    )


def build_tokenizer(alphabet: str | None = None) -> PreTrainedTokenizerFast:
    """Build the character-level tokenizer (see the module docstring for its layout).

    Args:
        alphabet: the characters to give ids to, in order; ``None`` means
            :data:`DEFAULT_ALPHABET`. Repeated characters keep their first position.

    Returns:
        a ``PreTrainedTokenizerFast`` with ``<pad>``/``<bos>``/``<eos>``/``<unk>`` set as its
        pad/bos/eos/unk tokens; ``len(tokenizer) == 4 + len(set(alphabet))``.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    if alphabet is None:
        alphabet = DEFAULT_ALPHABET
    if not isinstance(alphabet, str) or not alphabet:
        raise ValueError(
            f"alphabet must be a non-empty string of characters, got {alphabet!r}; "
            "pass None for the built-in DEFAULT_ALPHABET"
        )
    chars = list(dict.fromkeys(alphabet))  # dedupe, keep order
    clash = [c for c in chars if c in "<>"]
    if clash:
        raise ValueError(
            f"alphabet must not contain {clash}: '<' and '>' would let plain text spell the "
            f"special tokens {SPECIAL_TOKENS}; remove them from the alphabet"
        )

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for c in chars:
        vocab[c] = len(vocab)

    pad, bos, eos, unk = SPECIAL_TOKENS
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    # One pre-token per character ([\s\S] also matches newlines, unlike '.').
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()  # join tokens with no separator
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A",
        pair=f"{bos} $A $B",
        special_tokens=[(bos, vocab[bos])],
    )
    backend.add_special_tokens(list(SPECIAL_TOKENS))

    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=pad,
        bos_token=bos,
        eos_token=eos,
        unk_token=unk,
        clean_up_tokenization_spaces=False,
    )
