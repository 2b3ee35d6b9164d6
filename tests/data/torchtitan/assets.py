"""Writes the two inputs torchtitan 0.3.0's llama3 debugmodel config reads from the working
directory (its hf_assets_path ./tests/assets/tokenizer and its c4_test dataset, which ship in
torchtitan's repository, not its wheel): a word-level vocabulary (its tokenizer's vocab.json path)
and 64 lines of random words (a local JSON dataset). Used by record.sh."""
import json
import os
import random

words = [f"w{i}" for i in range(200)]
os.makedirs("tests/assets/tokenizer", exist_ok=True)
os.makedirs("tests/assets/c4_test", exist_ok=True)
vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
with open("tests/assets/tokenizer/vocab.json", "w") as f:
    json.dump(vocab, f)
with open("tests/assets/tokenizer/tokenizer_config.json", "w") as f:
    json.dump({"bos_token": "<s>", "eos_token": "</s>"}, f)
rnd = random.Random(0)
with open("tests/assets/c4_test/data.json", "w") as f:
    for _ in range(64):
        f.write(json.dumps({"text": " ".join(rnd.choice(words) for _ in range(400))}) + "\n")
