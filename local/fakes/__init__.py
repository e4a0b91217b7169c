"""Local stand-ins for the services outside AWS (and for Bedrock), with recording and faults.

Each stand-in is imported from its own module (`local.fakes.telegram.TelegramFake`...): this
package imports none of them, so loading one stand-in loads no other (and no import cycle runs
through the package)."""
