// Types of helpers.mjs, for the TypeScript tests in ts/.
import type { Client } from 'polylock'

export function backends(): Array<[backend: 'redis' | 'zookeeper', url: string]>
export function testsBackend(backend: 'redis' | 'zookeeper'): boolean
export function unique(prefix: string): string
export function eventually(check: () => boolean | Promise<boolean>, ms?: number): Promise<boolean>
export function serverIsClean(client: Client, backend: string, url: string, name: string): Promise<boolean>
export function semaphoreKeys(name: string): { timeouts: string; queue: string; queueDeadline: string }
export function redisPermitsHeld(url: string, name: string): Promise<number>
export function semaphoreLeftovers(url: string, name: string): Promise<string[]>
export function expireRedisPermits(url: string, name: string): Promise<number>
export function zkChildren(url: string, path: string): Promise<string[]>
