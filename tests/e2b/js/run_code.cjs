// Create a sandbox with the key in E2B_API_KEY, run code in it, kill it; print what came back.
const { Sandbox } = require('@e2b/code-interpreter')

async function main() {
  const sandbox = await Sandbox.create()
  const execution = await sandbox.runCode(process.argv[2] || '1 + 1')
  await sandbox.kill()
  console.log(JSON.stringify({ sandboxId: sandbox.sandboxId, text: execution.text }))
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
