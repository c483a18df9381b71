"""The Hugging Face `tokenizers` package's tokenizer for a path, as normgrow reads one:
a tokenizer.json, or a directory holding one. Shared by the tokenizer tools."""
import os

import tokenizers


def load(path):
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    return tokenizers.Tokenizer.from_file(path)
