/** The panel's sidebar icon: a page with a play mark, in JupyterLab's icon colours. */
import { LabIcon } from '@jupyterlab/ui-components';

const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M5 2h10l5 5v13a2 2 0 0 1-2 2H5a2 2 0 0 1-2-2V4a2 2 0 0 1 2-2zm0 2v16h13V8h-4V4z"/>
    <path d="M9 10.5v7l5.5-3.5z"/>
  </g>
</svg>`;

export const execIcon = new LabIcon({ name: 'jupyter-exec:sessions', svgstr: svg });
