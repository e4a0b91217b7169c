"""Two of python-telegram-bot's own example bots, from its 22.8 release on PyPI (the sdist's
`examples/`, CC0 1.0: LICENSE.txt here), as a user would bring them: each file is the upstream one
with only its `main()` changed, to take the builder the pipeline hands over and return the
Application instead of polling (`make local ARGS="--bot bot.examples.ptb.inlinekeyboard2:main"`).
Not linted or reformatted here, so that `diff` against upstream shows only `main()`.
"""
