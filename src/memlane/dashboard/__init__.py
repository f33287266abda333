"""The web dashboard (server-rendered pages at ``/dashboard``): :mod:`.routes` (the pages and
their JSON), :mod:`.service` (what each page reads, over the container's services), :mod:`.auth`
(login codes and cookie sessions bound to the token)."""
