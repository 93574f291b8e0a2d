// Package redis is the fenced sink of workrouter on a Redis server.
package redis
