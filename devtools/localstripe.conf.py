"""gunicorn settings for localstripe, the Stripe-compatible fake (PyPI, GPL-3.0) that `make run`
and the Stripe tests run as a separate process: it is never vendored or imported by this
project, only served by gunicorn in its own process, bound to 127.0.0.1 (localstripe's own
`python -m localstripe` listens on every interface). Run:

    python -m gunicorn -c devtools/localstripe.conf.py -b 127.0.0.1:8092 localstripe.server:app
"""

worker_class = "aiohttp.GunicornWebWorker"
workers = 1
# No control socket in the home directory: two copies on one machine would share it.
control_socket_disable = True
