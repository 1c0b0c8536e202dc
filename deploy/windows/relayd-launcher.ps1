<#
.SYNOPSIS
    Starts relayd for a Task Scheduler task and keeps its log under 10 MB.

.DESCRIPTION
    Task Scheduler has no per-task environment and no log handling, so both tasks start
    relayd through this script. It sets XDG_CONFIG_HOME (where relayd keeps its identity and
    bindings), removes RELAY_CLIENT_TOKEN (a route credential of whoever registered the task
    must never reach the daemon), appends relayd's log lines (stderr) to relayd.log, and
    rotates that file when it grows over 10 MB, keeping five older files.
    The exit status is relayd's, so the task's "restart on failure" setting sees a crash.

    Install beside relayd.exe (C:\ProgramData\Relay\bin); see docs/operations.md.

.PARAMETER Scope
    System: the startup task; state and logs under %ProgramData%\Relay.
    User: the logon task; state and logs under %LOCALAPPDATA%\Relay.
#>
[CmdletBinding()]
param(
    [ValidateSet('System', 'User')]
    [string] $Scope = 'User'
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

# Rotate when the log is over this many bytes.
$MaxLogBytes = 10MB
# How many rotated files (relayd.log.1 … relayd.log.5) are kept.
$KeepLogs = 5

if ($Scope -eq 'System') {
    $base = Join-Path $env:ProgramData 'Relay'
} else {
    $base = Join-Path $env:LOCALAPPDATA 'Relay'
}
$configHome = Join-Path $base '.config'
$logDir = Join-Path $base 'logs'
$log = Join-Path $logDir 'relayd.log'
$relayd = Join-Path $PSScriptRoot 'relayd.exe'

New-Item -ItemType Directory -Force -Path $configHome, $logDir | Out-Null

$env:XDG_CONFIG_HOME = $configHome
Remove-Item -Path Env:RELAY_CLIENT_TOKEN -ErrorAction SilentlyContinue

function Invoke-LogRotation {
    param([string] $Path)
    if (-not (Test-Path -LiteralPath $Path)) { return }
    if ((Get-Item -LiteralPath $Path).Length -le $MaxLogBytes) { return }
    for ($n = $KeepLogs - 1; $n -ge 1; $n--) {
        $older = "$Path.$n"
        if (Test-Path -LiteralPath $older) {
            Move-Item -LiteralPath $older -Destination "$Path.$($n + 1)" -Force
        }
    }
    Move-Item -LiteralPath $Path -Destination "$Path.1" -Force
}

function Open-Log {
    param([string] $Path)
    $stream = [System.IO.File]::Open($Path, 'Append', 'Write', 'Read')
    $writer = New-Object System.IO.StreamWriter($stream, (New-Object System.Text.UTF8Encoding($false)))
    $writer.AutoFlush = $true
    return $writer
}

$startInfo = New-Object System.Diagnostics.ProcessStartInfo
$startInfo.FileName = $relayd
$startInfo.UseShellExecute = $false
$startInfo.RedirectStandardError = $true
$startInfo.CreateNoWindow = $true
$startInfo.WorkingDirectory = $base
# The child gets this process's environment as it is now; make sure of both changes.
$startInfo.EnvironmentVariables['XDG_CONFIG_HOME'] = $configHome
$startInfo.EnvironmentVariables.Remove('RELAY_CLIENT_TOKEN')

Invoke-LogRotation -Path $log
$writer = Open-Log -Path $log
$process = [System.Diagnostics.Process]::Start($startInfo)
try {
    while ($null -ne ($line = $process.StandardError.ReadLine())) {
        $writer.WriteLine($line)
        if ($writer.BaseStream.Length -gt $MaxLogBytes) {
            $writer.Dispose()
            Invoke-LogRotation -Path $log
            $writer = Open-Log -Path $log
        }
    }
    $process.WaitForExit()
} finally {
    $writer.Dispose()
}
exit $process.ExitCode
