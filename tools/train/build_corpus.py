#!/usr/bin/python3
"""Build the training corpus for the tiny cllm model.

Sources (Debian packages, read from the installed system):
  * bible-kjv-text (+ its reader bible-kjv): King James Version, public domain.
    Dumped with `bible -f Gen1:1-Rev22:21`.
  * fortunes-zh: /usr/share/games/fortunes/{tang300,song100} (classical Tang/Song
    poems) and the classical entries of /usr/share/games/fortunes/chinese
    (论语, 道德经, 谚语, 菜根谭, 增广贤文 only; modern quotes and Debian docs are skipped).
  * Short ChatML dialogues generated from the above.

Output: OUT/train.jsonl and OUT/test.jsonl, one document per line:
  {"kind": "kjv"|"poem"|"chat", "text": "..."}
Chat documents contain the ChatML special tokens as literal text.
Held-out split: every 20th KJV chapter and every 20th poem/entry, plus dialogues
generated only from held-out material.
"""
import json, os, random, re, subprocess, sys

SEED = 1234
BOOKS = [
    ("Ge", "Genesis"), ("Exo", "Exodus"), ("Lev", "Leviticus"), ("Num", "Numbers"),
    ("Deu", "Deuteronomy"), ("Josh", "Joshua"), ("Jdgs", "Judges"), ("Ruth", "Ruth"),
    ("1Sm", "1 Samuel"), ("2Sm", "2 Samuel"), ("1Ki", "1 Kings"), ("2Ki", "2 Kings"),
    ("1Chr", "1 Chronicles"), ("2Chr", "2 Chronicles"), ("Ezra", "Ezra"), ("Neh", "Nehemiah"),
    ("Est", "Esther"), ("Job", "Job"), ("Psa", "Psalms"), ("Prv", "Proverbs"),
    ("Eccl", "Ecclesiastes"), ("SSol", "Song of Solomon"), ("Isa", "Isaiah"), ("Jer", "Jeremiah"),
    ("Lam", "Lamentations"), ("Eze", "Ezekiel"), ("Dan", "Daniel"), ("Hos", "Hosea"),
    ("Joel", "Joel"), ("Amos", "Amos"), ("Obad", "Obadiah"), ("Jonah", "Jonah"), ("Mic", "Micah"),
    ("Nahum", "Nahum"), ("Hab", "Habakkuk"), ("Zep", "Zephaniah"), ("Hag", "Haggai"),
    ("Zec", "Zechariah"), ("Mal", "Malachi"), ("Mat", "Matthew"), ("Mark", "Mark"),
    ("Luke", "Luke"), ("John", "John"), ("Acts", "Acts"), ("Rom", "Romans"),
    ("1Cor", "1 Corinthians"), ("2Cor", "2 Corinthians"), ("Gal", "Galatians"),
    ("Eph", "Ephesians"), ("Phi", "Philippians"), ("Col", "Colossians"),
    ("1Th", "1 Thessalonians"), ("2Th", "2 Thessalonians"), ("1Tim", "1 Timothy"),
    ("2Tim", "2 Timothy"), ("Titus", "Titus"), ("Phmn", "Philemon"), ("Heb", "Hebrews"),
    ("Jas", "James"), ("1Pet", "1 Peter"), ("2Pet", "2 Peter"), ("1Jn", "1 John"),
    ("2Jn", "2 John"), ("3Jn", "3 John"), ("Jude", "Jude"), ("Rev", "Revelation"),
]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def load_kjv():
    raw = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True,
                         text=True, check=True).stdout
    verses = []  # (book_full, chap, verse, text)
    abbr2full = dict(BOOKS)
    for line in raw.splitlines():
        m = re.match(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$", line)
        if not m:
            continue
        ab, c, v, t = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).strip()
        verses.append((abbr2full[ab], c, v, t))
    assert len(verses) == 31102, len(verses)
    chapters = {}
    order = []
    for b, c, v, t in verses:
        if (b, c) not in chapters:
            chapters[(b, c)] = []
            order.append((b, c))
        chapters[(b, c)].append((v, t))
    return [(b, c, chapters[(b, c)]) for b, c in order]


def parse_fortunes(path):
    txt = ANSI.sub("", open(path, encoding="utf-8").read())
    return [e.strip("\n") for e in txt.split("\n%\n") if e.strip()]


def load_poems():
    poems = []  # dict(title, author, lines)
    for name in ("tang300", "song100"):
        for e in parse_fortunes(f"/usr/share/games/fortunes/{name}"):
            lines = [l.strip() for l in e.split("\n") if l.strip()]
            if len(lines) < 3:
                continue
            title = re.sub(r"^题目[:：]", "", lines[0]).strip().replace("《", "").replace("》", " ").strip()
            author = re.sub(r"^作者[:：]", "", lines[1]).strip()
            author = re.sub(r"（.*?）", "", author).strip()
            body = lines[2:]
            poems.append(dict(title=title, author=author, lines=body))
    keep = ("论语", "道德经", "谚语", "菜根谭", "增广贤文")
    classics = []
    for e in parse_fortunes("/usr/share/games/fortunes/chinese"):
        lines = [l.rstrip() for l in e.split("\n")]
        src = [l for l in lines if l.strip().startswith("--")]
        if not src or not any(k in src[-1] for k in keep):
            continue
        s = src[-1].strip()[2:].strip()
        body = [l.strip() for l in lines if l.strip() and not l.strip().startswith("--")]
        m = re.search(r"《(.*?)》", s)
        classics.append(dict(title=m.group(1) if m else s, author="", lines=body))
    return poems, classics


def kjv_doc(b, c, vs):
    return f"{b} {c}\n" + "\n".join(f"{c}:{v} {t}" for v, t in vs) + "\n"


def poem_doc(p):
    if p["author"]:
        return f"《{p['title']}》\n{p['author']}\n" + "\n".join(p["lines"]) + "\n"
    return "\n".join(p["lines"]) + f"\n——《{p['title']}》\n"


SYSTEMS = ["", "", "", "You are a helpful assistant.", "You are a tiny language model.",
           "你是一个乐于助人的助手。"]


def chat(turns, system="", reasoning=""):
    """turns: list of (user, assistant). Rendered exactly like the chat template
    in tokenizer_config.json (history assistant turns without think block)."""
    s = ""
    if system:
        s += f"<|im_start|>system\n{system}<|im_end|>\n"
    for i, (u, a) in enumerate(turns):
        s += f"<|im_start|>user\n{u}<|im_end|>\n"
        if i == len(turns) - 1:
            r = reasoning.strip("\n")
            s += f"<|im_start|>assistant\n<think>\n{r}\n</think>\n\n{a}<|im_end|>\n"
        else:
            s += f"<|im_start|>assistant\n{a}<|im_end|>\n"
    return s


def split_verse(t):
    w = t.split()
    if len(w) < 6:
        return None
    k = len(w) // 2
    return " ".join(w[:k]), " ".join(w[k:])


def make_dialogues(rng, chapters, poems, classics, n):
    out = []
    verses = [(b, c, v, t) for b, c, vs in chapters for v, t in vs]
    greet = [
        ("Hello", "Hello! How can I help you today?"),
        ("Hi", "Hi! What would you like to read today?"),
        ("Who are you?", "I am a tiny language model trained on the King James Bible and classical Chinese poems."),
        ("What can you do?", "I can continue verses of the King James Bible, tell which book a verse is from, and recite classical Chinese poems."),
        ("你好", "你好！有什么可以帮你的吗？"),
        ("你是谁？", "我是一个很小的语言模型，读过英王钦定本圣经和中国古典诗词。"),
        ("Thank you!", "You are welcome."),
        ("谢谢", "不客气。"),
    ]
    for _ in range(n):
        kind = rng.random()
        sysm = rng.choice(SYSTEMS)
        reasoning = ""
        if kind < 0.04:
            u, a = rng.choice(greet)
            out.append(chat([(u, a)], sysm))
            continue
        if kind < 0.54 and verses:
            b, c, v, t = rng.choice(verses)
            task = rng.randrange(5)
            if task == 0:
                sp = split_verse(t)
                if not sp:
                    continue
                u = rng.choice(["Continue this verse: ", "Complete the verse: ", "Finish this: "]) + sp[0]
                a = sp[1]
            elif task == 1:
                u = rng.choice(["Which book of the Bible is this verse from? ",
                                "Where in the Bible is this from? ", "Which book is this from? "]) + f"\"{t}\""
                a = f"It is from the Book of {b}, {b} {c}:{v}."
                if rng.random() < 0.3:
                    reasoning = f"This verse is {b} {c}:{v}."
            elif task == 2:
                u = rng.choice(["Quote ", "Recite ", "What does this verse say: "]) + f"{b} {c}:{v}"
                a = t
            elif task == 3:
                vs = next(vs for bb, cc, vs in chapters if bb == b and cc == c)
                nxt = [tt for vv, tt in vs if vv == v + 1]
                if not nxt:
                    continue
                u = f"What comes after \"{t}\"?"
                a = nxt[0]
            else:
                sp = split_verse(t)
                if not sp:
                    continue
                u1 = "Continue this verse: " + sp[0]
                u2 = "Which book is it from?"
                out.append(chat([(u1, sp[1]), (u2, f"It is from the Book of {b}, {b} {c}:{v}.")], sysm))
                continue
            out.append(chat([(u, a)], sysm, reasoning))
            continue
        if kind < 0.85 and poems:
            p = rng.choice(poems)
            task = rng.randrange(4)
            if task == 0:
                u = rng.choice(["请背诵", "背一下", "请写出"]) + f"《{p['title']}》"
                a = "\n".join(p["lines"])
                if p["author"]:
                    a = f"《{p['title']}》 {p['author']}\n" + a
            elif task == 1 and p["author"]:
                u = f"《{p['title']}》的作者是谁？"
                a = f"《{p['title']}》的作者是{p['author']}。"
            elif task == 2 and len(p["lines"]) >= 2:
                i = rng.randrange(len(p["lines"]) - 1)
                u = rng.choice(["续写下一句：", "下一句是什么？", "接下一句："]) + p["lines"][i]
                a = p["lines"][i + 1]
            else:
                line = rng.choice(p["lines"])
                u = f"“{line}”出自哪首诗？"
                a = f"出自《{p['title']}》" + (f"，作者是{p['author']}。" if p["author"] else "。")
            out.append(chat([(u, a)], sysm))
            continue
        if classics:
            p = rng.choice(classics)
            line = rng.choice(p["lines"])
            if rng.random() < 0.5:
                out.append(chat([(f"“{line}”出自哪里？", f"出自《{p['title']}》。")], sysm))
            else:
                out.append(chat([(f"请说一段{p['title']}。", "\n".join(p["lines"]))], sysm))
    return out


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/cllm_corpus"
    os.makedirs(outdir, exist_ok=True)
    rng = random.Random(SEED)
    chapters = load_kjv()
    poems, classics = load_poems()
    ch_tr = [x for i, x in enumerate(chapters) if i % 20 != 7]
    ch_te = [x for i, x in enumerate(chapters) if i % 20 == 7]
    po_tr = [x for i, x in enumerate(poems) if i % 20 != 7]
    po_te = [x for i, x in enumerate(poems) if i % 20 == 7]
    cl_tr = [x for i, x in enumerate(classics) if i % 20 != 7]
    cl_te = [x for i, x in enumerate(classics) if i % 20 == 7]
    for name, chs, pos, cls, nd in (("train", ch_tr, po_tr, cl_tr, 6000),
                                    ("test", ch_te, po_te, cl_te, 300)):
        docs = [dict(kind="kjv", text=kjv_doc(*x)) for x in chs]
        docs += [dict(kind="poem", text=poem_doc(p)) for p in pos + cls]
        docs += [dict(kind="chat", text=t) for t in make_dialogues(rng, chs, pos, cls, nd)]
        rng.shuffle(docs)
        with open(os.path.join(outdir, f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for d in docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
        kinds = {}
        for d in docs:
            kinds[d["kind"]] = kinds.get(d["kind"], 0) + len(d["text"])
        print(name, len(docs), "docs; chars by kind:", kinds)
    print("poems", len(poems), "classics", len(classics), "chapters", len(chapters))


if __name__ == "__main__":
    main()
