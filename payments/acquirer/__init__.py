"""The Django side of the acquirer: what this project does with :mod:`gateway_client`.

``client`` builds the client and its policies from settings; the other modules of this package
map payments to gateway requests, count the client's events, read and operate its shared state.
Nothing here imports the payments services; the services stand on this package.
"""
