"""The distributed layer's shared pieces: peer authentication, members and placement views."""
