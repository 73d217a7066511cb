"""The demo app: a few example jobs, the endpoints the HTTP jobs call, and ``strait_demo``."""
