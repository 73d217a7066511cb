"""The example project: django-strait installed in a plain Django site, with a demo app."""
