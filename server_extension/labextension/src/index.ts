/**
 * jupyter-exec's JupyterLab extension: a side panel of the server's jupyter-exec
 * sessions (see panel.ts), and a command to show it.
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';

import { ExecAPI } from './api';
import { execIcon } from './icon';
import { SessionsPanel } from './panel';

const PANEL_ID = 'jupyter-exec-sessions';
const SHOW = 'jupyter-exec:show-sessions';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-exec:sessions',
  description: "A side panel listing the server's jupyter-exec sessions, live.",
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null
  ): void => {
    const panel = new SessionsPanel({
      api: new ExecAPI(app.serviceManager.serverSettings),
      // A session's notebook is bound to its kernel on the server, so opening it joins that kernel.
      open: path => app.commands.execute('docmanager:open', { path, factory: 'Notebook' })
    });
    panel.id = PANEL_ID;
    panel.title.icon = execIcon;
    panel.title.caption = 'jupyter-exec sessions';
    app.shell.add(panel, 'left', { rank: 650 });
    restorer?.add(panel, PANEL_ID);
    app.commands.addCommand(SHOW, {
      label: 'Show jupyter-exec Sessions',
      execute: () => app.shell.activateById(PANEL_ID)
    });
    palette?.addItem({ command: SHOW, category: 'jupyter-exec' });
  }
};

export default plugin;
