"""``python -m oracle run|replay ...``: see campaign.py."""
from .campaign import main

main()
