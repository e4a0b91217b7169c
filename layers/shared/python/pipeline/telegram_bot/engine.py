"""The bot consumer's engine: the user's python-telegram-bot Application, one update per record.

Imported by the function's init (`pipeline.telegram_bot.runner`), python-telegram-bot's first import
without Passport's cryptography (`pipeline.telegram_bot.passport`); its Bot API calls go over
`pipeline.telegram_bot.transport`.

`BOT_APPLICATION` names "package.module:callable" under functions/. The callable gets an
`ApplicationBuilder` configured here (the token from the telegram_bot_token secret, the Bot API
base from TELEGRAM_API_BASE, no updater and no job queue, the DynamoDB persistence, the journaled
request with pipeline.bot_api's timeout) and returns the built `Application` with its ordinary
handlers. The Application is built and initialized (getMe) at the first update and kept for the
warm instance's life, on one event loop. What would lose a step across instances (a
non-persistent ConversationHandler, arbitrary callback data) is refused at that build
(pipeline.telegram_bot.inspection): each update is dead-lettered with what to change.

Per update (`BotRunner.process`, the worker's `process`):

1. an update whose state was committed already (`applied#<event id>`) is not run again;
2. the stored conversation states of the update's keys replace the in-memory ones (another
   instance may have moved the conversation on); chat and user data are read on first use
   (any chat's or user's, `DynamoDBPersistence.begin`), the bot's by PTB's `refresh_bot_data`;
3. `Application.process_update` runs the handlers, each Bot API call journaled
   (pipeline.telegram_bot.calls);
4. an error a handler raised (PTB hands it to the error handlers: the user's run, and ours
   captures it) fails the record. A refused Bot API call is judged by the table the autoreply
   consumer reads too (`pipeline.bot_api_errors`): an answer saying its effect already held
   ("message is not modified" for a replayed edit, a callback query already answered) never
   fails the step (pipeline.telegram_bot.calls); 429 -> the whole bot waits `retry_after`, the
   record handed back (`pipeline.pacing`); 5xx,
   timeouts and network errors -> retried with backoff; 401 (the bot token revoked or rotated) ->
   the token secret re-read once past its cache (`pipeline.secrets.refresh_secret`) and, when it
   differs from the token the Application holds, the Application rebuilt with it and the update
   run once more (its calls that went out are answered from the journal); still refused -> paused,
   not dead-lettered (`AccountRefused`: the chat waits, in order, until the token works); a
   chat that can no longer be written to (the user blocked the bot, deleted the account) ->
   recorded as `blocked#<chat id>` in the journal and acknowledged, when it is the update's own
   private chat; the same refusal from any other chat (the bot was removed from a group it
   forwards to, or the group the update came from) is that call's error, not the user's:
   dead-lettered with a reason naming the method and the chat, so the step is kept for a
   redrive; any other refusal (400) -> dead-lettered with Telegram's description; any other
   exception -> retried;
5. a replayed call that differs from the one journaled for it stopped the step before it was
   sent (`ReplayDiverged`, whatever the handler did with the error): dead-lettered, nothing
   committed;
6. otherwise the changed state is committed in one conditional transaction (a lost race is
   retried on fresh state; should the rerun then make a different call, 5. stops it).
7. an update no handler took (a button of a conversation the chat is not in) is acknowledged
   as `unhandled` and counted (BotUpdatesUnhandled): a retry would find no handler either.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from telegram import Update
from telegram.error import InvalidToken, NetworkError, TelegramError
from telegram.ext import Application, ApplicationBuilder, ContextTypes

from pipeline.blocked import unreachable
from pipeline.bot_api import TIMEOUT_SECONDS, api_base
from pipeline.bot_api_errors import ChatUnreachable, Scope
from pipeline.envelope import Envelope
from pipeline.errors import UNAUTHORIZED, AccountRefused, ConsumerError, PermanentError, TransientError
from pipeline.secrets import refresh_secret, secret_string
from pipeline.telegram_bot.calls import (
    CallJournal,
    JournaledRequest,
    Refused,
    ReplayDiverged,
    crash_hook,
    journaled,
)
from pipeline.telegram_bot.inspection import ApplicationRefused, PipelineBuilder, check, refusals
from pipeline.telegram_bot.persistence import DynamoDBPersistence
from pipeline.telegram_bot.reference import APPLICATION_ENV, CRASH_HOOKS_ENV, ApplicationReference
from pipeline.telegram_bot.transport import PooledRequest

logger = Logger(child=True)
metrics = Metrics()

CONNECT_TIMEOUT_SECONDS = 5.0
POOL_TIMEOUT_SECONDS = 1.0
# One update at a time per instance: a small pool is plenty.
CONNECTION_POOL_SIZE = 8
# What `build_refusals` builds with: shaped like a token, never sent (nothing is initialized).
INSPECTION_TOKEN = "0:build-time-inspection"  # noqa: S105 - a placeholder, not a credential
# The registry's name of the secret the Application's token comes from.
TOKEN_SECRET = "telegram_bot_token"  # noqa: S105 - a secret's name, not its value


def bot_request(journal: CallJournal | None = None) -> JournaledRequest:
    """The Bot API client handlers call through: our urllib3 transport (`transport`), journaled."""
    hook = crash_hook if os.environ.get(CRASH_HOOKS_ENV) == "1" else None
    inner = PooledRequest(
        connection_pool_size=CONNECTION_POOL_SIZE,
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=TIMEOUT_SECONDS,
        write_timeout=TIMEOUT_SECONDS,
        pool_timeout=POOL_TIMEOUT_SECONDS,
        on_response=hook,
    )
    return JournaledRequest(inner, journal)


def configured_builder(
    token: str, persistence: DynamoDBPersistence, request: JournaledRequest
) -> ApplicationBuilder:  # type: ignore[type-arg]
    base = api_base()
    return (
        PipelineBuilder()
        .token(token)
        .base_url(f"{base}/bot")
        .base_file_url(f"{base}/file/bot")
        .request(request)
        # Never used (no updater), but PTB builds an HTTPXRequest for it when none is given.
        .get_updates_request(PooledRequest(connection_pool_size=1))
        .updater(None)
        .job_queue(None)
        .persistence(persistence)
    )


def load_application_factory(reference: ApplicationReference) -> Any:
    try:
        module = importlib.import_module(reference.module)
    except ImportError as error:
        raise PermanentError(f"{APPLICATION_ENV}: cannot import {reference.module} ({error})") from None
    factory = getattr(module, reference.attribute, None)
    if not callable(factory):
        raise PermanentError(f"{APPLICATION_ENV}: {reference} is not a callable")
    return factory


def build_refusals(reference: ApplicationReference) -> list[str]:
    """What the engine's build would refuse (pipeline.telegram_bot.inspection), found without
    the token or the network, so the synth and the local start refuse it before a deploy. Other
    failures of the user's build are raised as they are."""
    factory = load_application_factory(reference)
    builder = configured_builder(INSPECTION_TOKEN, DynamoDBPersistence(), bot_request())
    try:
        application = factory(builder)
    except ApplicationRefused as error:
        return [error.reason.removeprefix(f"{APPLICATION_ENV}: ")]
    return refusals(application) if isinstance(application, Application) else []


def classify(error: BaseException) -> BaseException:
    """The worker's view of an error a handler raised (see the module docstring, 4.)."""
    cause = error.__cause__
    if isinstance(error, ConsumerError):
        return error
    if isinstance(error, NetworkError) and isinstance(cause, ConsumerError):
        return cause  # our journal or state store failed inside the request wrapper
    if isinstance(cause, Refused) and isinstance(error, TelegramError):
        error = cause  # PTB's do_api_request re-raises a 401/404 as EndPointNotFound
    if isinstance(error, Refused):
        # A refused call: the table's error (a `done` answer is never raised).
        return error.verdict.error(error.chat_id) or error
    # Raised by PTB without an answer from Telegram:
    if isinstance(error, InvalidToken):  # a token PTB refuses to send (malformed)
        return AccountRefused("telegram: the bot token was refused", UNAUTHORIZED)
    if isinstance(error, NetworkError):  # TimedOut included: no answer came, so retry
        return TransientError(f"telegram: {type(error).__name__}: {error.message}")
    if isinstance(error, TelegramError):
        return PermanentError(f"telegram: {type(error).__name__}: {error.message}")
    return error


def blocked_by_the_user(update: Update, error: Refused) -> bool:
    """Whether a refused call means the user closed the chat: a `chat` refusal (blocked, account
    deleted) from the private chat the update came from. Any other chat's (a group the bot was
    removed from) is an error of that call."""
    chat = update.effective_chat
    return (
        error.verdict.scope is Scope.CHAT
        and chat is not None
        and chat.type == chat.PRIVATE
        and error.chat_id is not None
        and str(error.chat_id) == str(chat.id)
    )


class BotEngine:
    """One per execution environment (`BotRunner.engine`); `process` is the worker's `process`."""

    def __init__(
        self, persistence: DynamoDBPersistence | None = None, journal: CallJournal | None = None
    ) -> None:
        self._persistence = persistence
        self._journal = journal
        self._application: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._token: str | None = None  # the one the Application was built with
        self._loop: asyncio.AbstractEventLoop | None = None
        self._errors: list[BaseException] = []
        self._prepared_request: JournaledRequest | None = None

    def prepare(self) -> None:
        """At the init (`BotRunner`, in an execution environment): what the first update would make
        besides the team's Application, which needs the token (an AWS call): the Bot API request
        with its HTTP client and TLS context, the persistence and the event loop. Lambda runs the
        init at a full vCPU, an update at the memory's share of one."""
        self._prepared_request = bot_request(self._journal)
        self.persistence  # noqa: B018 - built now, not by the first update
        self.loop  # noqa: B018

    @property
    def persistence(self) -> DynamoDBPersistence:
        if self._persistence is None:
            self._persistence = DynamoDBPersistence()
        return self._persistence

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        # One loop for the instance's life: the Application's HTTP connections belong to it.
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop

    async def _capture(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        if context.error is not None:
            self._errors.append(context.error)

    async def application(self) -> Application[Any, Any, Any, Any, Any, Any]:
        if self._application is None:
            reference = ApplicationReference.parse(os.environ.get(APPLICATION_ENV, ""))
            factory = load_application_factory(reference)
            self._token = secret_string(TOKEN_SECRET).strip()
            request, self._prepared_request = self._prepared_request or bot_request(self._journal), None
            builder = configured_builder(self._token, self.persistence, request)
            application = factory(builder)
            if not isinstance(application, Application):
                raise PermanentError(f"{APPLICATION_ENV}: {reference} did not return an Application")
            if application.persistence is not self.persistence:
                raise PermanentError(f"{APPLICATION_ENV}: {reference} replaced the pipeline's persistence")
            check(application, reference)  # what would lose steps across instances
            application.add_error_handler(self._capture)
            try:
                await application.initialize()
            except TelegramError as error:
                raise classify(error) from error
            self._application = application
        return self._application

    def process(self, envelope: Envelope) -> dict[str, Any]:
        return self.loop.run_until_complete(self.process_refreshing(envelope))

    async def process_refreshing(self, envelope: Envelope) -> dict[str, Any]:
        """`process_update`, once more after a 401 if the token secret now holds another token
        (the consumers' rule, `pipeline.secrets.with_refreshed_secret`): a token rotated with
        @BotFather works at the next delivery, not with the next execution environment."""
        try:
            return await self.process_update(envelope)
        except AccountRefused as error:
            if error.cause != UNAUTHORIZED or not await self._rebuilt_with_new_token():
                raise
        return await self.process_update(envelope)

    async def _rebuilt_with_new_token(self) -> bool:
        """Re-read the token past the cache (at most once a minute: `refresh_secret`); when it is
        not the one the Application holds, forget the Application (the next `application()`
        builds one with it). Compared with the held token, not the cache: the cache may have
        expired into the new value while the Application kept the old one."""

        refresh_secret(TOKEN_SECRET)
        if secret_string(TOKEN_SECRET).strip() == self._token:
            return False
        old, self._application, self._token = self._application, None, None
        if old is not None:
            try:
                await old.bot.shutdown()  # its HTTP client; state lives in the persistence
            except Exception:  # a client that will not close is only dropped
                logger.warning("the old Application's Bot API client did not close")
        logger.info("bot token changed in its secret: Application rebuilt with it")
        return True

    async def process_update(self, envelope: Envelope) -> dict[str, Any]:
        application = await self.application()
        persistence = self.persistence
        if persistence.table.applied(envelope.event_id):
            logger.info("update already applied: its state was committed before")
            return {"bot": "already applied"}
        update = Update.de_json(envelope.payload, application.bot)
        if update is None:
            raise PermanentError("telegram update could not be read")
        persistence.begin(application)
        self._errors.clear()
        with journaled(envelope.event_id) as step:
            handlers = [h for group in application.handlers.values() for h in group]
            persistence.reload_conversations(handlers, update)
            # PTB's own test (Application.process_update), asked first to count what it drops.
            unhandled = not any(h.check_update(update) not in (None, False) for h in handlers)
            await application.process_update(update)
            # Stages the changes (errors captured too); after a failed step as well, which then
            # discards them: PTB's marks and drops of that step must not reach the next update.
            try:
                await application.update_persistence()
            except Exception:
                if not self._errors and step.diverged is None:
                    raise
        if step.diverged is not None:
            persistence.discard()
            self._errors.clear()
            metrics.add_metric(name="BotReplaysDiverged", unit=MetricUnit.Count, value=1)
            logger.error("replay diverged from the calls already sent: step stopped")
            raise ReplayDiverged(step.diverged)
        if self._errors:
            persistence.discard()
            raised = self._errors[0]
            self._errors.clear()
            if isinstance(raised, Refused) and blocked_by_the_user(update, raised):
                return self._blocked(update, raised, envelope)
            raise classify(raised) from raised
        writes = persistence.commit(envelope.event_id)
        if step.replayed:
            metrics.add_metric(name="BotCallsReplayed", unit=MetricUnit.Count, value=step.replayed)
        if unhandled:
            return self._unhandled(update)
        return {"bot": "processed", "calls": step.calls, "replayed": step.replayed, "writes": writes}

    def _unhandled(self, update: Update) -> dict[str, Any]:
        """No handler took the update (a button of a conversation this chat is not in, an edit
        the bot ignores): acknowledged, since a retry would find no handler either, but counted,
        so a bot that drops steps shows up (BotUpdatesUnhandled), not only a silent chat."""
        kind = next((name for name, value in update.to_dict().items() if name != "update_id"), "unknown")
        chat = update.effective_chat
        metrics.add_metric(name="BotUpdatesUnhandled", unit=MetricUnit.Count, value=1)
        logger.info(
            "no handler took the update: acknowledged, counted as unhandled",
            extra={"update": kind, "chat_id": chat.id if chat else None},
        )
        return {"bot": "unhandled", "update": kind}

    def _blocked(self, update: Update, error: Refused, envelope: Envelope) -> dict[str, Any]:
        chat = update.effective_chat
        assert chat is not None  # blocked_by_the_user checked it
        unreachable(ChatUnreachable(error.verdict, chat.id), envelope.event_id, chat.id)
        return {"bot": "blocked", "chat_id": chat.id}
