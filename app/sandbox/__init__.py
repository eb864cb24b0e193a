"""The sandbox provider: a stand-in for the WhatsApp Cloud API, written from its docs alone.

It shares no code with Ratchet's provider modules (or it would share their bugs) and never
touches Ratchet's database. Run it with ``python -m app.sandbox --port N``; see docs/sandbox.md.
"""
