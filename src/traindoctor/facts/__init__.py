"""Each topic's facts, static and runtime side by side: rules import facts; facts import the engines' cores."""
