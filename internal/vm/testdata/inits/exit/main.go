// Command exit is a guest init that exits at once: PID 1 ending panics the
// guest kernel ("Attempted to kill init!").
package main

func main() {}
