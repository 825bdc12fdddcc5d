"""The oracle harness: hostile and benign model files, judged by the real readers.

A case (a file, or a folder of files) is run through every ordinary reader in a
sandboxed, forked child; a reader that creates ``tensorplay_pwned_marker`` ran the
payload. tensorplay's scanner, loaders and unsafe-globals listing then run on the
same case, and ``check`` names every disagreement. See README.md beside this file.
Run as ``cd tests && python -m oracle run --cpu-seconds N``.
"""
