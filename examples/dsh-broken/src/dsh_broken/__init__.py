"""Deliberately broken dsh plugins; each module is one kind of mistake."""
