"""The corpus of strings the tokenizer parity fixtures are made from: hand-written edge cases,
sentences in several scripts and their variants, seeded random strings, long texts, and malformed
UTF-8. Shared by make_tokenizer_corpus.py (SmolLM2) and make_vocab_corpora.py (other vocabularies),
so that every vocabulary is checked on the same strings. Deterministic: no network, no model.
"""

import random

HANDWRITTEN = [
    "", " ", "  ", "   ", "\n", "\n\n", "\n\n\n", "\t", "\t\t", "\r\n", "\r", " \n", "\n ", " \t \n ",
    "Hello world", "Hello world!", " Hello world", "Hello  world", "Hello   world", "Hello world ",
    "Hello world  ", "hello\nworld", "hello\n\nworld", "hello\r\nworld", "hello\tworld", "hello \n world",
    "The quick brown fox jumps over the lazy dog.", "THE QUICK BROWN FOX", "tHe QuIcK bRoWn",
    "I'm", "I'M", "you're", "YOU'RE", "we've", "they'll", "she'd", "it's", "IT'S", "don't", "DON'T",
    "can't won't shouldn't", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''", "'", "' s", "rock 'n' roll",
    "O'Neil's dog", "the '90s", "`code`", "\"quoted\"", "“smart quotes”", "‘single’", "«guillemets»",
    "12345", "1234567890", " 123", "a1b2c3", "3.14159", "-42", "1,000,000", "1e10", "0x1F", "v2.0.1",
    "2024-05-17", "12:30:45", "$100", "€50", "£20", "¥1000", "100%", "1/2", "½", "¼ ¾", "x²", "H₂O",
    "Ⅻ", "ⅻ", "٣٤٥", "۱۲۳", "१२३", "１２３", "①②③", "𝟙𝟚𝟛", "፩", "〇一二三",
    "Café déjà vu.", "naïve résumé", "Ünïcödé", "façade", "Ελληνικά", "Привет, мир!", "Здравствуйте",
    "你好，世界！", "我爱自然语言处理。", "日本語のテキストです。", "カタカナ", "ひらがな", "한국어 텍스트",
    "안녕하세요", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "हिन्दी", "สวัสดีชาวโลก", "Tiếng Việt",
    "ქართული", "Հայերեն", "አማርኛ", "ᠮᠣᠩᠭᠣᠯ", "ᚠᚢᚦᚨᚱᚲ", "𐌰𐌱𐌲", "ꦗꦮ", "தமிழ்", "ಕನ್ನಡ", "ଓଡ଼ିଆ",
    "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵", "❤️", "✨ sparkle ✨", "🤖 robots", "a😀b",
    " 😀", "😀 ", "🙂🙃", "🫠", "🧑🏿‍🚀", "©®™", "→←↑↓", "∑∫∂√∞≠≤≥", "αβγδε", "ℕℤℚℝℂ", "Å", "Å",
    "e\u0301", "\u0301", "a\u0300\u0301\u0302", "\u200b", "a\u200bb", "\u200d", "\ufeff", "\ufeffBOM",
    "\u00a0", "a\u00a0b", "a\u2000b", "a\u2003b", "a\u3000b", "a\u180eb", "a\u0085b", "a\u2028b",
    "a\u2029b", "a\u202fb", "a\u205fb", "a\u1680b", "a\u000bb", "a\u000cb", "a\u001cb", "a\u001fb",
    "\u00ad", "soft\u00adhyphen", "\u2060", "\ue000", "\U000f0000", "\U0010ffff", "\uffff", "\ufffd",
    "\x00", "a\x00b", "a\x04b", "\x13\x14", "\x16x\x1d", "\U00040000", "x\U000b0001y", "\x01\x02\x03", "\x7f", "\x80", "\x9f", "\xa0", "\xad", "\xff", "ÿ", "Ā", "Ġ", "Ċ",
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "#include <stdio.h>\nint main() { printf(\"hi\\n\"); }", "if x == 1:\n        pass\n\n\n",
    "    indented", "\t\tindented", "x  =  1", "a = b + c * d / e - f % g", "a->b", "a::b", "a && b || !c",
    "<div class=\"x\">Hello</div>", "<html><body></body></html>", "{\"key\": [1, 2, 3], \"v\": null}",
    "SELECT * FROM users WHERE id = 1;", "https://example.com/path?q=1&r=2#frag", "user@example.com",
    "C:\\Users\\name\\file.txt", "/usr/local/bin/", "~/.bashrc", "$HOME", "${var}", "@decorator",
    "#hashtag", "@mention", "!!!", "???", "...", "…", "—", "–", "--", "---", "***", "___", "===", "~~~",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>user\nHello!<|im_end|>\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|>", "<|im_start|><|im_start|>", "text<|im_end|>text", " <|im_end|> ",
    "<|im_start", "im_start|>", "<|im_start|", "<|IM_START|>", "< |im_start| >", "<|im_start|>>",
    "<<|im_start|>", "<repo_name>", "<file_sep>", "<filename>x.py", "<gh_stars>100", "<jupyter_code>",
    "<issue_start>title<issue_comment>body<issue_closed>", "<empty_output>", "<jupyter_output>",
    "<reponame>", "<jupyter_start>", "<jupyter_text>", "<commit_before>", "<commit_msg>", "<commit_after>",
]


def long_texts():
    words = ("the of and to in is that for it as was with be by on not he this are or his from at which "
             "but have an they you were her all she there would their we him been has when who will no more "
             "if out so said what up its about than into them can only other new some could time these two "
             "may then do first any my now such like our over man me even most made after also did many").split()
    rng = random.Random(1234)
    paragraphs = []
    for _ in range(60):
        sentence_count = rng.randint(3, 8)
        sentences = []
        for _ in range(sentence_count):
            n = rng.randint(4, 18)
            s = " ".join(rng.choice(words) for _ in range(n))
            if rng.random() < 0.3:
                s += f" {rng.randint(0, 99999)}"
            sentences.append(s[0].upper() + s[1:] + rng.choice([".", ".", ".", "!", "?"]))
        paragraphs.append(" ".join(sentences))
    text = "\n\n".join(paragraphs)
    return [text, text[:4000] + "\n" + " " * 300 + "\n" + "\t" * 50 + "end", "a" * 5000, "ab" * 3000,
            "0123456789" * 300, "😀" * 1000, "." * 3000, " " * 3000, "\n" * 2000, "x " * 2000,
            "A quick test. " * 200, "深度学习" * 500]


def random_strings(count):
    """Strings drawn from a mix of character pools, seeded, so the corpus is the same every run."""
    rng = random.Random(20240517)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " " * 6 + "\t\n\r",
        "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
        "éèêëàâäôöûüçñßøåæœÉÀÇÑ",
        "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВГД",
        "αβγδεζηθικλμνξοπρστυφχψω",
        "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
        "あいうえおかきくけこアイウエオ",
        "가나다라마바사아자차카타파하",
        "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
        "अआइईउऊएऐओऔकखगघ्ािीु",
        "😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩👍🏽🏿‍♀️",
        "²³¹½¼¾٠١٢٣۴५६७８９ⅠⅡⅢ",
        "\u00a0\u2002\u2009\u3000\u200b\u200d\u0301\u0308\ufeff",
        "'sdtmlvre",
    ]
    out = []
    for i in range(count):
        n = rng.choice([1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144])
        chosen = rng.sample(pools, rng.randint(1, 4))
        s = "".join(rng.choice(rng.choice(chosen)) for _ in range(n))
        if i % 7 == 0:
            s = s.replace("'", "'s ")
        if i % 11 == 0:
            s = rng.choice(["<|im_start|>", "<|im_end|>", "<|endoftext|>"]).join([s[: n // 2], s[n // 2 :]])
        out.append(s)
    # Arbitrary code points (not surrogates): exercises categories and Unicode versions where regex
    # engines may differ.
    for _ in range(count // 4):
        cps = []
        for _ in range(rng.randint(1, 12)):
            cp = rng.choice([rng.randint(0x20, 0x2FF), rng.randint(0x300, 0xD7FF), rng.randint(0xE000, 0xFFFD),
                             rng.randint(0x10000, 0x3FFFF)])
            cps.append(chr(cp))
        out.append("".join(cps))
    return out


def sentences():
    base = [
        "Machine learning models are trained on large datasets.",
        "The capital of France is Paris, and the capital of Japan is Tokyo.",
        "In 1969, Apollo 11 landed on the Moon.",
        "Please summarize the following article in three sentences.",
        "What's the difference between a list and a tuple in Python?",
        "Dr. Smith's office hours are 9:00-17:00 (Mon.-Fri.).",
        "E = mc^2 is Einstein's famous equation.",
        "She said, \"I'll be there at 5 o'clock.\"",
        "Version 3.11.4 was released on 2023-06-06.",
        "Les élèves étudient le français à l'école.",
        "Der schnelle braune Fuchs springt über den faulen Hund.",
        "El niño comió una manzana en el jardín.",
        "Быстрая коричневая лиса прыгает через ленивую собаку.",
        "敏捷的棕色狐狸跳过了懒狗。",
        "素早い茶色の狐がのろまな犬を飛び越える。",
        "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
        "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    ]
    out = []
    for s in base:
        out += [s, s.lower(), s.upper(), " " + s, s + "\n", s.replace(" ", "  "), s.replace(" ", "\n"),
                s.replace(" ", "\t"), s.replace(" ", ""), s + " " + s]
    return out


def corpus_texts():
    """The corpus in order, duplicates removed (first occurrence kept)."""
    texts = HANDWRITTEN + sentences() + random_strings(700) + long_texts()
    seen, unique = set(), []
    for t in texts:
        if t not in seen:
            seen.add(t)
            unique.append(t)
    return unique


# Not valid UTF-8, so not representable in JSON or acceptable to HF: fixtures carry them as hex, and
# the tests check only that encoding does not fail and decoding gives the bytes back.
MALFORMED = [b"\xff", b"\xfe\xff", b"abc\x80def", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(",
             b"\xf0\x9f\x98", b"\xf0\x9f\x98 ok", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe0\x80\xaf",
             b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b" \xff ", b"12\xff34", b"\x80\x80\x80",
             b"<|im_start|>\xff<|im_end|>", b"hello \xc3\xa9\xc3 world", bytes(range(256)),
             bytes(range(255, -1, -1)) * 4]
