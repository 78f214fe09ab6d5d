"""The committed results pages rendered from their records: each `*.md.jinja` template under
`recipes/experiments/results/` and `docs/` is Markdown with every figure, count and verdict
word an expression over the records of a results folder (`records`), formatted by `words`;
`typed` finds what a template types by hand instead; `render` writes the pages and checks
them; `onmt-posenc pages` (command) runs both."""
