"""One module per dashboard page; views parse, call one query or service, render."""
