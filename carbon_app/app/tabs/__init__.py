"""The app's tabs: each module lays out one tab and wires its own thin handlers (widgets in, the
service, formatting functions, widgets out)."""
