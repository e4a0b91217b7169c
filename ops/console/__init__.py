"""The ops console (`python -m ops console`): the ops CLI's views and actions as a local web page.

`events` builds each event's path from the functions' log lines and the DLQs; `data` reads every
page's rows through the CLI's own functions; `pages` renders them; `app` serves them (Starlette,
uvicorn) on 127.0.0.1 with a token, a session and CSRF checks.
"""
